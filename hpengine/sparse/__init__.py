"""Incidence, degrees, normalisation and the factored transition operator."""
from hpengine.sparse._incidence import (
    augmented_incidence,
    coalesce_pairs,
    csr_arrays,
    csr_from_sorted_pairs,
    csr_index_dtype,
    csr_with_values,
    csr_row_entries,
    gather_csr_rows,
    inverse_or_zero,
    node_degree,
)
from hpengine.sparse._factored import SparseChain, expanded_rows, factored_incidence, row_pairs, scaled_csr
from hpengine.sparse._sort import sort_keys, sorted_contains, unique_keys
from hpengine.sparse._transition import TransitionOperator
from hpengine.sparse._dispatch import expand_frontier, walk_product, walk_step

__all__ = [
    "SparseChain",
    "TransitionOperator",
    "augmented_incidence",
    "coalesce_pairs",
    "csr_arrays",
    "csr_from_sorted_pairs",
    "csr_index_dtype",
    "csr_with_values",
    "expand_frontier",
    "expanded_rows",
    "factored_incidence",
    "csr_row_entries",
    "gather_csr_rows",
    "inverse_or_zero",
    "node_degree",
    "row_pairs",
    "scaled_csr",
    "sort_keys",
    "sorted_contains",
    "unique_keys",
    "walk_product",
    "walk_step",
]
