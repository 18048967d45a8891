"""tcjit.mapping: MappingOptions, the CPU and GPU mappers, kernel IR and its printers.

Not written yet (the polyhedral core and CPU backend come next). May import tcjit.polyhedral and
islpy; never torch.
"""
