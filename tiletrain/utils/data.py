"""torch.utils.data for tiletrain: Dataset, TensorDataset, DataLoader (batching, shuffling
with a seeded Generator, drop_last, collate_fn) and random_split.  Batches are collated on the
host and made into tiletrain tensors (one from_numpy per field); workers (num_workers > 0) are
not supported."""
from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence

import numpy as np

from ..ops.index import multinomial_rows
from ..ops.shape import stack
from ..tensors import Generator, Tensor, default_generator, from_numpy
from ..tensors.creation import _generator

__all__ = ["Dataset", "TensorDataset", "DataLoader", "default_collate", "random_split", "Subset", "ConcatDataset",
           "IterableDataset", "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler"]


def _c(a) -> np.ndarray:
    """a as a C-contiguous array that keeps 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    return np.array(a, order="C")


class Dataset:
    """An indexable collection: subclasses define __getitem__ (and __len__ for a DataLoader)."""

    def __getitem__(self, index):  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} has no __getitem__")


class TensorDataset(Dataset):
    """Samples are the i-th rows of each tensor (tiletrain Tensors or NumPy arrays)."""

    def __init__(self, *tensors):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        n = {len(t) for t in tensors}
        if len(n) != 1:
            raise ValueError("Size mismatch between tensors")
        self.tensors = tuple(t.numpy(force=True) if isinstance(t, Tensor) else np.asarray(t) for t in tensors)

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return len(self.tensors[0])


class Subset(Dataset):
    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, i):
        return self.dataset[self.indices[i]]

    def __len__(self):
        return len(self.indices)


class IterableDataset(Dataset):
    """A stream of samples: subclasses define __iter__ (a DataLoader batches what it yields)."""

    def __iter__(self):  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} has no __iter__")


class ConcatDataset(Dataset):
    """The datasets one after another."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]))

    def __len__(self):
        return int(self.cumulative_sizes[-1])

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx += len(self)
        k = int(np.searchsorted(self.cumulative_sizes, idx, side="right"))
        return self.datasets[k][idx - (int(self.cumulative_sizes[k - 1]) if k else 0)]


class Sampler:
    """Yields dataset indices (subclasses define __iter__ and __len__)."""

    def __init__(self, data_source=None):
        pass


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """A new permutation per iteration (with replacement: num_samples draws, 32 at a time),
    drawn as torch's: without a generator, from a fresh Generator seeded by one draw of the
    default generator at the first index; the last, partial permutation is drawn whole."""

    def __init__(self, data_source, replacement: bool = False, num_samples=None, generator=None):
        self.data_source, self.replacement, self.generator = data_source, replacement, generator
        self._num_samples = num_samples
        if num_samples is not None and (not isinstance(num_samples, int) or num_samples <= 0):
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n = len(self.data_source)
        g = Generator().manual_seed(default_generator.full_range()) if self.generator is None \
            else _generator("RandomSampler", self.generator)
        if self.replacement:
            for _ in range(self.num_samples // 32):
                yield from g.integers(32, 0, n).tolist()
            yield from g.integers(self.num_samples % 32, 0, n).tolist()
        else:
            for _ in range(self.num_samples // n):
                yield from g.permutation(n).tolist()
            yield from g.permutation(n).tolist()[:self.num_samples % n]

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    def __init__(self, indices, generator=None):
        self.indices, self.generator = list(indices), generator

    def __iter__(self):
        for i in _generator("SubsetRandomSampler", self.generator).permutation(len(self.indices)).tolist():
            yield self.indices[i]

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """num_samples indices drawn with probabilities proportional to weights."""

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None):
        w = np.asarray(weights.numpy(force=True) if isinstance(weights, Tensor) else weights, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape {tuple(w.shape)}")
        if not isinstance(num_samples, int) or num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")
        if not replacement and num_samples > len(w):
            raise ValueError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
        self.weights, self.num_samples, self.replacement, self.generator = w, num_samples, replacement, generator

    def __iter__(self):
        rows = multinomial_rows(self.weights[None, :], self.num_samples, self.replacement,
                                _generator("WeightedRandomSampler", self.generator))
        return iter(rows[0].tolist())

    def __len__(self):
        return self.num_samples


class BatchSampler(Sampler):
    def __init__(self, sampler, batch_size: int, drop_last: bool):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        return _chunks(self.sampler, self.batch_size, self.drop_last)

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


def _chunks(items, size: int, drop_last: bool):
    """Lists of ``size`` consecutive items (the last one shorter unless drop_last)."""
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch and not drop_last:
        yield batch


def random_split(dataset, lengths, generator=None):
    """torch.utils.data.random_split with integer lengths or fractions (torch's permutation for
    the generator's seed)."""
    n = len(dataset)
    if all(isinstance(x, float) for x in lengths) and abs(sum(lengths) - 1) < 1e-9:
        sizes = [int(np.floor(n * f)) for f in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    perm = _generator("random_split", generator).permutation(n)
    out, start = [], 0
    for k in lengths:
        out.append(Subset(dataset, perm[start:start + k].tolist()))
        start += k
    return out


def default_collate(batch):
    """Stack a list of samples: tensors with stack, NumPy arrays and numbers into one
    tensor (floats -> the array's dtype, Python floats -> float64 as torch, ints -> int64),
    tuples, lists and dicts field by field."""
    first = batch[0]
    if isinstance(first, Tensor):
        return stack(list(batch))
    if isinstance(first, (np.ndarray, np.generic)):
        a = np.stack([np.asarray(b) for b in batch])
        if a.dtype.kind in "iu":
            a = a.astype(np.int64)
        return from_numpy(_c(a))
    if isinstance(first, bool):
        raise TypeError("default_collate: bool samples are not supported")
    if isinstance(first, numbers.Integral):
        return from_numpy(np.asarray(batch, dtype=np.int64))
    if isinstance(first, numbers.Real):
        return from_numpy(np.asarray(batch, dtype=np.float64))
    if isinstance(first, (str, bytes)):
        return list(batch)
    if isinstance(first, Mapping):
        return {k: default_collate([b[k] for b in batch]) for k in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(default_collate(list(f)) for f in zip(*batch)))
    if isinstance(first, Sequence):
        return [default_collate(list(f)) for f in zip(*batch)] if isinstance(first, list) else \
            tuple(default_collate(list(f)) for f in zip(*batch))
    raise TypeError(f"default_collate: samples of type {type(first).__name__} are not supported")


class DataLoader:
    """Batches of a map-style dataset: indices in order or shuffled (a new permutation per
    epoch from ``generator``, default tiletrain's default generator), ``batch_size`` at a
    time, ``drop_last``, collated by ``collate_fn`` (default_collate)."""

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool = False, sampler=None,
                 batch_sampler=None, num_workers: int = 0, collate_fn=None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn=None, generator=None, **kwargs):
        if num_workers:
            raise NotImplementedError("DataLoader: num_workers > 0 is not supported (batches are made in the "
                                      "main process; tile tasks already run on every core)")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size <= 0):
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
            raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                             "and drop_last")
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, batch_size, shuffle, drop_last
        self.generator = generator
        if sampler is None and not isinstance(dataset, IterableDataset):
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and sampler is not None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self.collate_fn = default_collate if collate_fn is None else collate_fn

    def __iter__(self):
        # torch draws a base seed (for its worker processes) from the loader's generator each
        # time an iteration starts: drawn here too, so later draws stay torch's
        _generator("DataLoader", self.generator).full_range()
        return self._iterate()

    def _iterate(self):
        if isinstance(self.dataset, IterableDataset):
            items = iter(self.dataset)
            if self.batch_size is None:
                yield from items
                return
            for b in _chunks(items, self.batch_size, self.drop_last):
                yield self.collate_fn(b)
            return
        if self.batch_sampler is not None:
            for b in self.batch_sampler:
                yield self.collate_fn([self.dataset[i] for i in b])
            return
        for i in self.sampler:
            yield self.collate_fn(self.dataset[i]) if self.collate_fn is not default_collate else self.dataset[i]

    def __len__(self):
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        if self.sampler is not None:
            return len(self.sampler)
        n = len(self.dataset)
        return n if self.batch_size is None else n // self.batch_size if self.drop_last else -(-n // self.batch_size)
