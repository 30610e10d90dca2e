"""Shared machinery of the algorithmic studies (not a study itself).

* ``convergence``: train a task model until it fits in-distribution, or a step cap; cached.
* ``engine``: task/variant sweeps, evaluation by size, seed spreads, verdicts, report sections.
"""
