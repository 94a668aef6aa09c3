# hone deploy render: coloc-dp4 (vllm, colocated)
# warning: vLLM version unknown: rendered for the newest vLLM, unchecked, without --enable-per-request-metrics; give the installed version (hone deploy render --vllm-version auto) to adapt
# replica-0: role colocated, GPUs 0, http://127.0.0.1:8100
env CUDA_VISIBLE_DEVICES=0 vllm serve Qwen/Qwen2.5-Coder-0.5B-Instruct --revision 3a0a1ffbb1b1a2f2b3e0d2b5a1b3c4d5e6f70812 --served-model-name Qwen/Qwen2.5-Coder-0.5B-Instruct --host 127.0.0.1 --port 8100 --tensor-parallel-size 1 --dtype bfloat16 --kv-cache-dtype fp8 --no-enable-prefix-caching --enable-prompt-tokens-details --enforce-eager --speculative-config '{"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4}' &
# replica-1: role colocated, GPUs 1, http://127.0.0.1:8101
env CUDA_VISIBLE_DEVICES=1 vllm serve Qwen/Qwen2.5-Coder-0.5B-Instruct --revision 3a0a1ffbb1b1a2f2b3e0d2b5a1b3c4d5e6f70812 --served-model-name Qwen/Qwen2.5-Coder-0.5B-Instruct --host 127.0.0.1 --port 8101 --tensor-parallel-size 1 --dtype bfloat16 --kv-cache-dtype fp8 --no-enable-prefix-caching --enable-prompt-tokens-details --enforce-eager --speculative-config '{"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4}' &
# replica-2: role colocated, GPUs 2, http://127.0.0.1:8102
env CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-Coder-0.5B-Instruct --revision 3a0a1ffbb1b1a2f2b3e0d2b5a1b3c4d5e6f70812 --served-model-name Qwen/Qwen2.5-Coder-0.5B-Instruct --host 127.0.0.1 --port 8102 --tensor-parallel-size 1 --dtype bfloat16 --kv-cache-dtype fp8 --no-enable-prefix-caching --enable-prompt-tokens-details --enforce-eager --speculative-config '{"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4}' &
# replica-3: role colocated, GPUs 3, http://127.0.0.1:8103
env CUDA_VISIBLE_DEVICES=3 vllm serve Qwen/Qwen2.5-Coder-0.5B-Instruct --revision 3a0a1ffbb1b1a2f2b3e0d2b5a1b3c4d5e6f70812 --served-model-name Qwen/Qwen2.5-Coder-0.5B-Instruct --host 127.0.0.1 --port 8103 --tensor-parallel-size 1 --dtype bfloat16 --kv-cache-dtype fp8 --no-enable-prefix-caching --enable-prompt-tokens-details --enforce-eager --speculative-config '{"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4}' &
# proxy: http://127.0.0.1:8000
hone proxy --spec testdata/specs/colocated-dp4.yaml
