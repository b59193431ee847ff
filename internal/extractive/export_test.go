package extractive

// Tighten is tighten, for the external tests.
var Tighten = tighten

// CasualChat is casualChat, for the external tests.
var CasualChat = casualChat
