# hone deploy render: emu-disagg-1p2d (emulator, disaggregated)
# prefill-0: role prefill, GPUs 0, http://127.0.0.1:8100
env CUDA_VISIBLE_DEVICES=0 VLLM_NIXL_SIDE_CHANNEL_HOST=127.0.0.1 VLLM_NIXL_SIDE_CHANNEL_PORT=5600 hone sim serve --role prefill --host 127.0.0.1 --port 8100 --model Qwen/Qwen2.5-Coder-0.5B-Instruct --profile exercise --time-scale 0.5 --no-enable-prefix-caching --enable-prompt-tokens-details --enable-per-request-metrics --trace-file /tmp/hone-traces/prefill-0.jsonl --fault crash-after=100 &
# decode-0: role decode, GPUs 1, http://127.0.0.1:8101
env CUDA_VISIBLE_DEVICES=1 VLLM_NIXL_SIDE_CHANNEL_HOST=127.0.0.1 VLLM_NIXL_SIDE_CHANNEL_PORT=5601 hone sim serve --role decode --host 127.0.0.1 --port 8101 --model Qwen/Qwen2.5-Coder-0.5B-Instruct --profile exercise --time-scale 0.5 --no-enable-prefix-caching --enable-prompt-tokens-details --enable-per-request-metrics --trace-file /tmp/hone-traces/decode-0.jsonl &
# decode-1: role decode, GPUs 2, http://127.0.0.1:8102
env CUDA_VISIBLE_DEVICES=2 VLLM_NIXL_SIDE_CHANNEL_HOST=127.0.0.1 VLLM_NIXL_SIDE_CHANNEL_PORT=5602 hone sim serve --role decode --host 127.0.0.1 --port 8102 --model Qwen/Qwen2.5-Coder-0.5B-Instruct --profile exercise --time-scale 0.5 --no-enable-prefix-caching --enable-prompt-tokens-details --enable-per-request-metrics --trace-file /tmp/hone-traces/decode-1.jsonl &
# proxy: http://127.0.0.1:8000
hone proxy --spec testdata/specs/emulator-disagg-1p2d.yaml
