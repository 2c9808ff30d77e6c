"""Test helpers shipped with the package: NumPy references for every kernel."""
