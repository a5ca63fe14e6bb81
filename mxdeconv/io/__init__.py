"""Files: MXNet's binary NDArray format (``.params``).
"""
