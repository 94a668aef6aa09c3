// Package release holds no code: its tests check hone's install artefacts,
// which are not Go (scripts/release.sh behind `make release`, the
// Dockerfile), so that `make test` runs them.
package release
