"""The scorer's trees as padded numpy arrays: every section of a turn through every tree at once.

A turn grades ~20 sections and explains the best one (~16 more rows); walking 150 trees node by node
in Python for each row cost ~2 ms a turn. The sum over trees runs left to right (cumsum), as the
per-tree Python sum did, so the raw scores are the same floats."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray


class TreeArrays(Protocol):
    """One tree's node arrays (policy/scorer.py's `Tree`): a leaf has left == -1."""

    feature: list[int]
    threshold: list[float]
    left: list[int]
    right: list[int]
    value: list[float]


@dataclass(frozen=True)
class Forest:
    feature: NDArray[np.intp]  # (trees, nodes); a leaf (or padding) reads feature 0 and never uses it
    threshold: NDArray[np.float64]
    left: NDArray[np.intp]  # -1 at a leaf
    right: NDArray[np.intp]
    value: NDArray[np.float64]

    @classmethod
    def of(cls, trees: Sequence[TreeArrays]) -> "Forest":
        n = max(len(t.value) for t in trees)

        def pad(name: str, fill: float, dtype: type) -> np.ndarray:
            out: np.ndarray = np.full((len(trees), n), fill, dtype=dtype)
            for i, t in enumerate(trees):
                col = getattr(t, name)
                out[i, : len(col)] = col
            return out

        feature = pad("feature", 0, np.intp)
        left = pad("left", -1, np.intp)
        feature[left == -1] = 0  # scikit-learn marks a leaf's feature -2: never index with it
        return cls(feature, pad("threshold", 0.0, np.float64), left, pad("right", -1, np.intp),
                   pad("value", 0.0, np.float64))

    def tree_sums(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        """Per row of `x` (rows, features): the sum of the trees' leaf values, trees in order."""
        rows, trees = x.shape[0], np.arange(self.feature.shape[0])
        node = np.zeros((rows, len(trees)), dtype=np.intp)
        row_idx = np.arange(rows)[:, None]
        while True:
            left = self.left[trees, node]
            inner = left != -1
            if not inner.any():
                break
            go_left = x[row_idx, self.feature[trees, node]] <= self.threshold[trees, node]
            node = np.where(inner, np.where(go_left, left, self.right[trees, node]), node)
        return np.cumsum(self.value[trees, node], axis=1)[:, -1]
