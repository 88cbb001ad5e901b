// placeholder
extern "C" __global__ void loom_sample_rows(int *x) { *x = 1; }
