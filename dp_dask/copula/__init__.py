"""The Gaussian copula's driver-side math, model and partitioned sampling."""
