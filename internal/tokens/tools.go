package tokens

import (
	"fmt"
	"strings"

	"github.com/compactor/compactor/internal/models"
)

// ForModel returns a counter for the encoding the shipped model table gives
// model (the default estimate encoding for an unknown model).
func ForModel(model string) (*Counter, error) {
	return ForEncoding(models.Default().Lookup(model).Encoding)
}

// Function is a tool definition as sent in a request's "tools", reduced to
// what counting needs.
type Function struct {
	Name        string
	Description string
	Properties  []Property
}

// Property is one parameter of a Function.
type Property struct {
	Name, Type, Description string
	Enum                    []string
}

// Tools returns the tokens that tool definitions add to a request, by the
// rule of OpenAI's Cookbook (num_tokens_for_tools): o200k models start each
// function at 7 tokens, cl100k models at 10.
func (c *Counter) Tools(fns []Function) int {
	if len(fns) == 0 {
		return 0
	}
	const propInit, propKey, enumInit, enumItem, funcEnd = 3, 3, -3, 3, 12
	funcInit := 10
	if c.name == models.O200kBase {
		funcInit = 7
	}
	n := 0
	for _, f := range fns {
		n += funcInit + c.Count(f.Name+":"+strings.TrimSuffix(f.Description, "."))
		if len(f.Properties) > 0 {
			n += propInit
			for _, p := range f.Properties {
				n += propKey
				if len(p.Enum) > 0 {
					n += enumInit
					for _, item := range p.Enum {
						n += enumItem + c.Count(item)
					}
				}
				n += c.Count(fmt.Sprintf("%s:%s:%s", p.Name, p.Type, strings.TrimSuffix(p.Description, ".")))
			}
		}
	}
	return n + funcEnd
}
