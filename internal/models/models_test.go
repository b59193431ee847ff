package models_test

import (
	"testing"

	"github.com/compactor/compactor/internal/models"
)

func TestLookup(t *testing.T) {
	tab := models.Default()
	tests := []struct {
		name, enc string
		window    int
		known     bool
	}{
		{"gpt-4o", models.O200kBase, 128000, true},
		{"gpt-4o-2024-08-06", models.O200kBase, 128000, true},
		{"gpt-4o-mini-2024-07-18", models.O200kBase, 128000, true},
		{"gpt-4-0613", models.CL100kBase, 8192, true},
		{"gpt-4-turbo-2024-04-09", models.CL100kBase, 128000, true},
		{"openai/gpt-4.1-mini", models.O200kBase, 1047576, true},
		{"claude-sonnet-4-5-20250929", models.CL100kBase, 200000, true},
		{"llama-3.1-8b-instruct", models.DefaultEncoding, models.DefaultContextLimit, false},
		{"gpt-4omni", models.DefaultEncoding, models.DefaultContextLimit, false},
	}
	for _, tt := range tests {
		got := tab.Lookup(tt.name)
		if got.Encoding != tt.enc || got.ContextWindow != tt.window || got.Known != tt.known {
			t.Errorf("Lookup(%q) = %+v", tt.name, got)
		}
	}
}

func TestOverride(t *testing.T) {
	tab, err := models.Default().With(models.Info{Name: "llama-3.1-8b-instruct", ContextWindow: 131072, Encoding: models.CL100kBase},
		models.Info{Name: "gpt-4o", ContextWindow: 64000, Encoding: models.O200kBase})
	if err != nil {
		t.Fatal(err)
	}
	if got := tab.Lookup("llama-3.1-8b-instruct"); got.ContextWindow != 131072 || !got.Known {
		t.Errorf("added model: %+v", got)
	}
	if got := tab.Lookup("gpt-4o-2024-05-13"); got.ContextWindow != 64000 {
		t.Errorf("override not applied to a dated name: %+v", got)
	}
	if _, err := models.NewTable([]models.Info{{Name: "x", ContextWindow: 10, Encoding: "nope"}}); err == nil {
		t.Error("unknown encoding accepted")
	}
	if _, err := models.NewTable([]models.Info{{Name: "x", Encoding: models.O200kBase}}); err == nil {
		t.Error("zero window accepted")
	}
}
