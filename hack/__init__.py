"""Tools for building, starting and exercising the local control plane."""
