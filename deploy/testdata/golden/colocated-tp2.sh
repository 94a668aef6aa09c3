# hone deploy render: coloc-tp2 (vllm, colocated)
# warning: vLLM version unknown: rendered for the newest vLLM, unchecked, without --enable-per-request-metrics; give the installed version (hone deploy render --vllm-version auto) to adapt
# replica-0: role colocated, GPUs 2,3, http://127.0.0.1:8100
env CUDA_VISIBLE_DEVICES=2,3 vllm serve Qwen/Qwen2.5-Coder-7B-Instruct --revision c03e6d358207e414f1eca0bb1891e29f1db0e242 --served-model-name Qwen/Qwen2.5-Coder-7B-Instruct --host 127.0.0.1 --port 8100 --tensor-parallel-size 2 --dtype bfloat16 --kv-cache-dtype auto --enable-prefix-caching --enable-prompt-tokens-details --max-num-seqs 256 --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9 --compilation-config '{"cudagraph_mode":"FULL_AND_PIECEWISE"}' &
# proxy: http://127.0.0.1:8000
hone proxy --spec testdata/specs/colocated-tp2.yaml
