"""tcjit.genetic: the DEAP genetic search over MappingOptions.

Not written yet. Candidate evaluation and persistence are functions handed in, never imported. May
import tcjit.mapping, deap and (optionally) ray.
"""
