package tokens

// CountWhole counts text in one call of tiktoken-go's encoder, for
// comparing with Count.
func (c *Counter) CountWhole(text string) int { return len(c.encoder().EncodeOrdinary(text)) }

// CountFast counts text with the fast counter alone (-1: the encoding has
// none).
func (c *Counter) CountFast(text string) int {
	if c.e.fast == nil {
		return -1
	}
	return c.e.fast.count(text)
}

// PreTokens are the pieces the fast counter's pre-tokeniser cuts text
// into (nil: the encoding has none).
func PreTokens(encoding, text string) []string {
	f, ok := fastFor[encoding]
	if !ok {
		return nil
	}
	var out []string
	for i := 0; i < len(text); {
		e := f.next(text, i)
		out = append(out, text[i:e])
		i = e
	}
	return out
}
