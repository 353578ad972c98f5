"""Optional fast kernels (installed as ``hpengine.kernels``).

None ship yet: every op in hpengine has a pure-PyTorch path that is the default on CPU and
CUDA. A kernel lands here (``k_<op>.py``) only with a benchmark that justifies it.
"""
