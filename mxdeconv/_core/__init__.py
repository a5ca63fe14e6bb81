"""Foundations: errors, contexts, dtypes, the aligned allocator and NDArray's compiled fields.

Nothing here knows NDArray's behaviour, the tape or oneDNN.
"""
