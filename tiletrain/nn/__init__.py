"""tiletrain.nn: modules and models, written like nanoGPT.

``Module`` registers Parameters and Modules assigned to it; ``GPT`` is GPT-2 with Hugging
Face's parameter names and layouts (``GPT.from_hf`` / ``GPT.to_hf_state_dict``).  How the
tensors are tiled is one ``Tiling`` argument of the model."""
from .activation import GELU, Flatten, Identity, ReLU, SiLU, Sigmoid, Tanh
from .gpt import GPT, LMHead, MLP, Block, CausalSelfAttention, GPTConfig, Tiling
from .layers import Conv1D, Dropout, Embedding, LayerNorm, Linear
from .module import IncompatibleKeys, Module, ModuleDict, ModuleList, Parameter, Sequential
# Llama (tiletrain/nn/llama.py)
from .llama import Llama, LlamaConfig  # noqa: E402
# CNN layers (tiletrain/nn/conv.py)
from .conv import (AvgPool1d, AvgPool2d, AvgPool3d, BatchNorm1d, BatchNorm2d, BatchNorm3d, Conv1d, Conv2d, Conv3d,
                   MaxPool1d, MaxPool2d, MaxPool3d)

__all__ = ["Module", "Parameter", "ModuleList", "ModuleDict", "IncompatibleKeys", "Linear", "LayerNorm",
           "Embedding", "Dropout", "MLP", "CausalSelfAttention", "Block", "LMHead", "GPT", "GPTConfig",
           "Tiling", "Conv1D", "GELU", "Flatten", "Identity", "ReLU", "SiLU", "Sigmoid", "Tanh"]
__all__ += ["Conv1d", "Conv2d", "Conv3d", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
            "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Sequential"]
__all__ += ["Llama", "LlamaConfig"]
# Hugging Face folders for every model (tiletrain/nn/pretrained.py)
from .pretrained import MODELS, from_pretrained, save_pretrained  # noqa: E402

__all__ += ["MODELS", "from_pretrained", "save_pretrained"]
