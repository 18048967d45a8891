"""tcjit"""
