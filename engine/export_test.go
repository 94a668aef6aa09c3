package engine

// Unregister removes an engine; tests use it to undo a Register.
func Unregister(name string) {
	mu.Lock()
	defer mu.Unlock()
	delete(registry, name)
}

// ParseVLLMVersionOutput finds the version in `vllm --version` output.
var ParseVLLMVersionOutput = parseVLLMVersionOutput
