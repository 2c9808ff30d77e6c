"""tiletrain.nn: modules and models, written like nanoGPT.

``Module`` registers Parameters and Modules assigned to it; ``GPT`` is GPT-2 with Hugging
Face's parameter names and layouts (``GPT.from_hf`` / ``GPT.to_hf_state_dict``).  How the
tensors are tiled is one ``Tiling`` argument of the model."""
from .gpt import GPT, LMHead, MLP, Block, CausalSelfAttention, GPTConfig, Tiling
from .layers import Dropout, Embedding, LayerNorm, Linear
from .module import IncompatibleKeys, Module, ModuleDict, ModuleList, Parameter
# CNN layers (tiletrain/nn/conv.py)
from .conv import (AvgPool1d, AvgPool2d, AvgPool3d, BatchNorm1d, BatchNorm2d, BatchNorm3d, Conv1d, Conv2d, Conv3d,
                   Flatten, MaxPool1d, MaxPool2d, MaxPool3d, ReLU, Sequential)

__all__ = ["Module", "Parameter", "ModuleList", "ModuleDict", "IncompatibleKeys", "Linear", "LayerNorm",
           "Embedding", "Dropout", "MLP", "CausalSelfAttention", "Block", "LMHead", "GPT", "GPTConfig",
           "Tiling"]
__all__ += ["Conv1d", "Conv2d", "Conv3d", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
            "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Sequential", "ReLU", "Flatten"]
