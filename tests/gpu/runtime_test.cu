// A kernel of the runtime test's own: proves a fatbin embedded by
// loom_add_fatbin loads and runs through the host's cuda table.
extern "C" __global__ void loom_test_axpy(float a, const float *x, float *y,
                                          int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}
