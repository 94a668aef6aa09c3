# hone deploy render: emu-dp2 (emulator, colocated)
# replica-0: role colocated, GPUs 0, http://127.0.0.1:8100
env CUDA_VISIBLE_DEVICES=0 hone sim serve --role colocated --host 127.0.0.1 --port 8100 --model Qwen/Qwen2.5-Coder-0.5B-Instruct --profile qwen2.5-coder-0.5b-h200 --time-scale 0.1 --enable-prompt-tokens-details --enable-per-request-metrics --max-num-seqs 128 --block-size 16 &
# replica-1: role colocated, GPUs 1, http://127.0.0.1:8101
env CUDA_VISIBLE_DEVICES=1 hone sim serve --role colocated --host 127.0.0.1 --port 8101 --model Qwen/Qwen2.5-Coder-0.5B-Instruct --profile qwen2.5-coder-0.5b-h200 --time-scale 0.1 --enable-prompt-tokens-details --enable-per-request-metrics --max-num-seqs 128 --block-size 16 &
# proxy: http://127.0.0.1:8000
hone proxy --spec testdata/specs/emulator-colocated-dp2.yaml
