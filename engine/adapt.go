package engine

import "context"

// Adapter is implemented by the Facts.Versioned engines: those whose
// commands depend on the installed release. deploy asks it, through the
// registry, what to render for that release and what to refuse; hone
// preflight asks it what the installed release can do. An engine without
// it renders the same command whatever is installed.
type Adapter interface {
	// InstalledVersion runs the engine's binary ("": Facts.Binary) to
	// learn the installed release, as the engine prints it ("0.11.1");
	// on any failure "" and the reason.
	InstalledVersion(ctx context.Context, binary string) (string, error)
	// ParseVersion reads a release as the engine prints it.
	ParseVersion(s string) (Version, error)
	// Adapt decides, for a valid deployment (l, with no worker) and the
	// installed release (as InstalledVersion gives it; "": unknown), what
	// Render changes (Adaptation, passed to Render in Launch.Features),
	// what to warn about, and what to refuse: a *FieldError naming the
	// spec field that release cannot run.
	Adapt(version string, l Launch) (Adaptation, []string, error)
	// Capabilities lists, for release v, each hone capability the
	// engine's release table decides, with what Render does about it:
	// hone preflight's checks.
	Capabilities(v Version) []Capability
}

// Adaptation is what Render changes for the installed release.
type Adaptation struct {
	// Version is the release adapted to, as the engine prints it; "" when
	// unknown (rendered for the newest release, unchecked).
	Version string
	// Features are what that release has, for Launch.Features.
	Features Features
}

// Capability is where one hone capability stands on an installed release.
type Capability struct {
	ID     string
	OK     bool
	Detail string
}

// FieldError refuses a deployment for one field of its spec: Field is
// its path under spec ("kv_connector.name"), Msg says why. deploy reports
// it as it reports its own field errors.
type FieldError struct{ Field, Msg string }

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// InstalledVersion is the release of engine name installed as binary
// ("": the engine's Facts.Binary), as Adapter.InstalledVersion reads it;
// "" and no error for an engine that adapts to none.
func InstalledVersion(ctx context.Context, name, binary string) (string, error) {
	e, _ := Lookup(name)
	a, ok := e.(Adapter)
	if !ok {
		return "", nil
	}
	return a.InstalledVersion(ctx, binary)
}
