// Package config reads the compactor's config file: the compaction
// settings, the summary provider and the model table's additions. Command
// line flags win over the file, the file over the defaults.
package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/compactor/compactor/internal/models"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/tenant"
)

// File is the config file's shape (JSON).
type File struct {
	// Compaction overrides pipeline.DefaultConfig field by field.
	Compaction json.RawMessage `json:"compaction,omitempty"`
	// Provider is extractive, openai or anthropic; BaseURL its endpoint.
	Provider string            `json:"provider,omitempty"`
	BaseURL  string            `json:"base_url,omitempty"`
	Timeout  pipeline.Duration `json:"timeout,omitempty"`
	// Models add to or replace entries of the shipped model table.
	Models []models.Info `json:"models,omitempty"`
	// Tenants are each tenant's policy and quotas, by its NATS account
	// name ("_" for the default tenant). serve reads them again on SIGHUP.
	Tenants map[string]Tenant `json:"tenants,omitempty"`
}

// Tenant is one tenant's policy (the summary model its requests use) and
// quotas.
type Tenant struct {
	pipeline.TenantPolicy
	tenant.Limits
}

// Policies are the tenants' policies.
func (l Loaded) Policies() map[string]pipeline.TenantPolicy {
	out := make(map[string]pipeline.TenantPolicy, len(l.Tenants))
	for t, c := range l.Tenants {
		out[t] = c.TenantPolicy
	}
	return out
}

// Limits are the tenants' quotas.
func (l Loaded) Limits() map[string]tenant.Limits {
	out := make(map[string]tenant.Limits, len(l.Tenants))
	for t, c := range l.Tenants {
		out[t] = c.Limits
	}
	return out
}

// Loaded is a config file applied to the defaults.
type Loaded struct {
	Compaction pipeline.Config
	Provider   string
	BaseURL    string
	Timeout    time.Duration
	Models     *models.Table
	Tenants    map[string]Tenant
}

// Defaults returns the configuration without a file.
func Defaults() Loaded {
	return Loaded{Compaction: pipeline.DefaultConfig(), Provider: "extractive", Timeout: 60 * time.Second, Models: models.Default()}
}

// Load reads path ("" means no file) over the defaults. Unknown fields, bad
// values and invalid model entries are errors naming the file.
func Load(path string) (Loaded, error) {
	l := Defaults()
	if path == "" {
		return l, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return l, err
	}
	var f File
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '{' {
		return l, fmt.Errorf("config %s: not a JSON object: the config file is JSON (YAML and other formats are not read), e.g. {\"compaction\": {\"keep_recent_turns\": 3}, \"provider\": \"openai\"}", path)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return l, fmt.Errorf("config %s: %w", path, err)
	}
	if len(f.Compaction) > 0 {
		if err := removedFields(f.Compaction); err != nil {
			return l, fmt.Errorf("config %s: compaction: %w", path, err)
		}
		dec := json.NewDecoder(bytes.NewReader(f.Compaction))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l.Compaction); err != nil {
			return l, fmt.Errorf("config %s: compaction: %w", path, err)
		}
		if err := l.Compaction.Validate(); err != nil {
			return l, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if f.Provider != "" {
		l.Provider = f.Provider
	}
	l.BaseURL = f.BaseURL
	if f.Timeout > 0 {
		l.Timeout = time.Duration(f.Timeout)
	}
	if len(f.Models) > 0 {
		t, err := l.Models.With(f.Models...)
		if err != nil {
			return l, fmt.Errorf("config %s: %w", path, err)
		}
		l.Models = t
	}
	for name, p := range f.Tenants {
		if name != tenant.Default {
			if err := tenant.Check(name); err != nil {
				return l, fmt.Errorf("config %s: tenants: %w", path, err)
			}
		}
		if p.SummaryContextLimit < 0 {
			return l, fmt.Errorf("config %s: tenants: %s: summary_context_limit must be >= 0", path, name)
		}
		if err := p.Limits.Check(); err != nil {
			return l, fmt.Errorf("config %s: tenants: %s: %w", path, name, err)
		}
	}
	l.Tenants = f.Tenants
	return l, nil
}

// removed are compaction fields a release took out, with what replaces
// them: a file that still sets one is told why, not only that the field
// is unknown.
var removed = map[string]string{
	"ledger_window_share": "removed: max_summary_tokens bounds the whole compaction message (ledger, working state and prose) at any window; raise it for a longer ledger",
}

// removedFields reports the first removed field that raw sets.
func removedFields(raw json.RawMessage) error {
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return nil // the strict decode says what is wrong
	}
	for name, why := range removed {
		if _, ok := fields[name]; ok {
			return fmt.Errorf("%s is %s", name, why)
		}
	}
	return nil
}
