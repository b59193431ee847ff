package tokens

// CountWhole counts text in one encoder call, for comparing with Count.
func (c *Counter) CountWhole(text string) int { return len(c.enc.EncodeOrdinary(text)) }
