# hone deploy render: disagg-p2p-1p1d (vllm, disaggregated)
# warning: vLLM version unknown: rendered for the newest vLLM, unchecked, without --enable-per-request-metrics; give the installed version (hone deploy render --vllm-version auto) to adapt
# prefill-0: role prefill, GPUs 0, http://127.0.0.1:8100
env CUDA_VISIBLE_DEVICES=0 VLLM_DISABLE_REQUEST_ID_RANDOMIZATION=1 VLLM_HOST_IP=127.0.0.1 vllm serve testdata/tiny-model --served-model-name tiny --host 127.0.0.1 --port 8100 --tensor-parallel-size 1 --enable-prefix-caching --enable-prompt-tokens-details --kv-transfer-config '{"kv_buffer_size":"1e9","kv_connector":"P2pNcclConnector","kv_connector_extra_config":{"http_port":"8100","proxy_ip":"127.0.0.1","proxy_port":"30001"},"kv_ip":"127.0.0.1","kv_port":"21001","kv_role":"kv_producer"}' &
# decode-0: role decode, GPUs 1, http://127.0.0.1:8101
env CUDA_VISIBLE_DEVICES=1 VLLM_DISABLE_REQUEST_ID_RANDOMIZATION=1 VLLM_HOST_IP=127.0.0.1 vllm serve testdata/tiny-model --served-model-name tiny --host 127.0.0.1 --port 8101 --tensor-parallel-size 1 --enable-prefix-caching --enable-prompt-tokens-details --kv-transfer-config '{"kv_buffer_size":"8e9","kv_connector":"P2pNcclConnector","kv_connector_extra_config":{"http_port":"8101","proxy_ip":"127.0.0.1","proxy_port":"30001","send_type":"PUT_ASYNC"},"kv_ip":"127.0.0.1","kv_port":"21002","kv_role":"kv_consumer"}' &
# proxy: http://127.0.0.1:8000
hone proxy --spec testdata/specs/disagg-p2pnccl-1p1d.yaml
