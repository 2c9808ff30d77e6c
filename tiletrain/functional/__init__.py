"""tiletrain.functional, conventionally ``import tiletrain.functional as F``: every op a
transformer needs, with autograd, under the names and argument orders of PyTorch's
torch.nn.functional (and torch for the basic arithmetic)."""
from ..ops.activations import *  # noqa: F401,F403
from ..ops.attention import *  # noqa: F401,F403
from ..ops.basic import broadcast, scale  # noqa: F401
from ..ops.linalg import matmul  # noqa: F401
from ..ops.elementwise import *  # noqa: F401,F403
from ..ops.reduce import *  # noqa: F401,F403
from ..ops.embedding import *  # noqa: F401,F403
from ..ops.index import one_hot  # noqa: F401
from ..ops.shape import flatten  # noqa: F401
from ..ops.norm import *  # noqa: F401,F403
from ..ops.softmax import *  # noqa: F401,F403
from .losses import *  # noqa: F401,F403
from .activations import *  # noqa: F401,F403
# convolution, pooling, batch norm (tiletrain/ops/conv.py)
from ..ops.conv import *  # noqa: F401,F403
from .extras import *  # noqa: F401,F403
from .sampling import *  # noqa: F401,F403
