package extractive

// Tighten is tighten, for the external tests.
var Tighten = tighten
