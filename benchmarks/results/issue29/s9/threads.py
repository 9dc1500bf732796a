"""Under aiopdbp launch -n 2: OMP_NUM_THREADS, CPU affinity, torch intra-op threads (torch.__config__.parallel_info())."""
import os
print(os.environ.get("OMP_NUM_THREADS"), os.sched_getaffinity(0), sorted(k for k in os.environ if 'MPI' in k or 'HYDRA' in k or 'OMP' in k or 'AIOPDBP' in k)[:30])
import torch; print(torch.get_num_threads(), torch.__config__.parallel_info())
