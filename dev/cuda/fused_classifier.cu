/*
 dev/cuda/fused_classifier.cu: softmax + cross-entropy + dlogits over a
 padded vocabulary, against a double-precision CPU reference.
   1  one block per row, three passes (max; sum of exp; write), scalar loads
   2  llmc/cuda/fused_classifier.cuh: online (max, sum) in one pass, 16-byte
      loads, then the write pass
 Shapes: GPT-2 (V = 50257, Vp = 50304) and an odd vocabulary (V = 1001).
 ./dev/cuda/fused_classifier [version]
*/
#include "dev/cuda/common.h"
#include "llmc/cuda/fused_classifier.cuh"

__global__ void classifier_v1(floatX* logits, float* losses, const int* targets, int V, int Vp, float dloss) {
    __shared__ float sh[32];
    __shared__ float lt;
    int row = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    floatX* l = logits + (size_t)row * Vp;
    int tgt = targets[row];
    if (threadIdx.x == 0) lt = bf(l[tgt]);
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, bf(l[j]));
    mx = warp_max(mx);
    if (lane == 0) sh[warp] = mx;
    __syncthreads();
    mx = -INFINITY;
    for (int w = 0; w < nw; w++) mx = fmaxf(mx, sh[w]);
    __syncthreads();
    float s = 0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(bf(l[j]) - mx);
    s = warp_sum(s);
    if (lane == 0) sh[warp] = s;
    __syncthreads();
    s = 0;
    for (int w = 0; w < nw; w++) s += sh[w];
    if (threadIdx.x == 0) losses[row] = logf(s) - (lt - mx);
    if (dloss == 0.0f) return;
    for (int j = threadIdx.x; j < Vp; j += blockDim.x)
        l[j] = tobf(j < V ? dloss * (expf(bf(l[j]) - mx) / s - (j == tgt ? 1.0f : 0.0f)) : 0.0f);
}

static void run_case(int N, int V, int Vp, int version) {
    printf("fused classifier N=%d V=%d Vp=%d\n", N, V, Vp);
    auto logits = rand_floats((size_t)N * Vp, 6.0f, 31);
    round_bf16(logits);
    std::vector<int> tg(N);
    for (int i = 0; i < N; i++) tg[i] = (int)(((unsigned long long)i * 2654435761ULL) % (unsigned long long)V);
    float dloss = 1.0f / N;
    std::vector<float> loss(N), dl((size_t)N * Vp);
    for (int n = 0; n < N; n++) {
        const float* l = &logits[(size_t)n * Vp];
        double mx = -1e300, s = 0;
        for (int j = 0; j < V; j++) mx = l[j] > mx ? l[j] : mx;
        for (int j = 0; j < V; j++) s += exp(l[j] - mx);
        loss[n] = (float)(log(s) - (l[tg[n]] - mx));
        for (int j = 0; j < Vp; j++) dl[(size_t)n * Vp + j] = j < V ? (float)(dloss * (exp(l[j] - mx) / s - (j == tg[n]))) : 0.0f;
    }
    int* d_tg;
    cudaCheck(cudaMalloc(&d_tg, N * 4));
    cudaCheck(cudaMemcpy(d_tg, tg.data(), N * 4, cudaMemcpyHostToDevice));
    float* d_loss;
    cudaCheck(cudaMalloc(&d_loss, N * 4));
    for (int v = 1; v <= 2; v++) {
        if (version && version != v) continue;
        floatX* d_l = to_device(logits);
        auto run = [&]() {
            if (v == 1) LLMC_LAUNCH(classifier_v1, N, 512, 0, 0, d_l, d_loss, d_tg, V, Vp, dloss);
            else fused_classifier(d_l, d_loss, d_tg, N, V, Vp, dloss);
            cudaCheckLaunch("classifier");
        };
        run();
        printf(" version %d\n", v);
        check("losses", from_device_f32(d_loss, N), loss, 1e-4, 1e-5);
        check("dlogits", from_device(d_l, (size_t)N * Vp), dl, 1e-9, 1e-2);
        /* timing on the forward-only path (dloss = 0 keeps the logits intact) */
        float ms = time_ms([&]() {
            if (v == 1) LLMC_LAUNCH(classifier_v1, N, 512, 0, 0, d_l, d_loss, d_tg, V, Vp, 0.0f);
            else fused_classifier(d_l, d_loss, d_tg, N, V, Vp, 0.0f);
        }, 10);
        printf("  %.4f ms (loss only; the gradient pass rewrites the row once more)\n", ms);
        cudaFree(d_l);
    }
    cudaFree(d_tg); cudaFree(d_loss);
}

int main(int argc, char** argv) {
    int version = dev_version_arg(argc, argv);
    run_case(DEV_SHAPE(1024, 32), DEV_SHAPE(50257, 5003), DEV_SHAPE(50304, 5008), version);
    run_case(DEV_SHAPE(333, 33), 1001, 1024, version);
    return dev_finish("fused_classifier");
}
