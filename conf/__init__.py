"""Hydra configuration files of the hpengine entry points (installed as ``hpengine.conf``)."""
