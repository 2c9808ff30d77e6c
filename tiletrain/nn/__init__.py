"""tiletrain.nn: modules and models, written like nanoGPT.

``Module`` registers Parameters and Modules assigned to it.  Every language model is a
``CausalLM`` (nn/causal_lm.py: the model contract and the one decoder ``Block``); ``GPT`` is
GPT-2 and ``Llama`` is Llama, with Hugging Face's parameter names and layouts.  ``MODELS``
(nn/pretrained.py) names them by config.json's model_type; ``from_pretrained`` /
``save_pretrained`` read and write Hugging Face folders.  How the tensors are tiled is one
``Tiling`` argument of the model."""
import sys as _sys

from .. import functional
from . import init, utils
from .activation import *  # noqa: F401,F403
from .activation import __all__ as _activations
from .loss import *  # noqa: F401,F403
from .loss import __all__ as _losses
from .extras import *  # noqa: F401,F403
from .extras import __all__ as _extras
from .rnn import GRU, GRUCell, LSTM, LSTMCell, RNN, RNNCell
from .transformer import (MultiheadAttention, Transformer, TransformerDecoder, TransformerDecoderLayer,
                          TransformerEncoder, TransformerEncoderLayer)
from .causal_lm import Block as DecoderBlock, CausalLM, LMHead, Tiling
from .conv import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d, AdaptiveMaxPool1d, AdaptiveMaxPool2d,
                   AdaptiveMaxPool3d, AvgPool1d, AvgPool2d, AvgPool3d, BatchNorm1d, BatchNorm2d, BatchNorm3d, Conv1d, Conv2d, Conv3d,
                   ConvTranspose1d, ConvTranspose2d, ConvTranspose3d, GroupNorm, InstanceNorm1d, InstanceNorm2d,
                   InstanceNorm3d, Upsample,
                   MaxPool1d, MaxPool2d, MaxPool3d, MaxUnpool1d, MaxUnpool2d, MaxUnpool3d)
from .gpt import GPT, MLP, Block, CausalSelfAttention, GPTConfig
from .layers import Bilinear, Conv1D, Dropout, Embedding, EmbeddingBag, LayerNorm, Linear, LocalHeads, RMSNorm
from .llama import Llama, LlamaConfig
from .module import IncompatibleKeys, Module, ModuleDict, ModuleList, Parameter, ParameterDict, ParameterList, Sequential
from .pretrained import MODELS, from_pretrained, load_model, register_model, save_pretrained

__all__ = ["Module", "Parameter", "ParameterDict", "ParameterList", "ModuleList", "ModuleDict", "IncompatibleKeys", "Linear", "LocalHeads", "LayerNorm", "RMSNorm",
           "Embedding", "EmbeddingBag", "Bilinear",
           "Dropout", "MLP", "CausalSelfAttention", "Block", "LMHead", "GPT", "GPTConfig",
           "Tiling", "Conv1D",
           "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "GroupNorm",
           "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "Upsample", "MaxPool1d", "MaxPool2d", "MaxPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
           "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
           "AdaptiveMaxPool3d",
           "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Sequential", "Llama", "LlamaConfig",
           "CausalLM", "DecoderBlock", "MODELS", "register_model", "from_pretrained", "save_pretrained", "load_model",
           "functional", "init", "utils", "GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNCell",
           "MultiheadAttention", "Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
           "TransformerEncoderLayer"] + _activations + _losses + _extras

# tiletrain.nn.functional is tiletrain.functional (one module, two names), so that
# `import tiletrain.nn.functional as F` works as torch's `import torch.nn.functional as F`
_sys.modules[__name__ + ".functional"] = functional
