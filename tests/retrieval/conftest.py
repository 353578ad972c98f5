import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """Run the retrieval tests single-threaded.

    Their tensors are tiny, so intra-op parallelism only adds overhead; on a shared 2-core machine
    an OpenMP region whose second thread is descheduled costs ~15 ms per op, which turned a 2 s
    test file into 35 s.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
