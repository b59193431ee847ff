package client

// Version is the version of the contract this client speaks, the same as
// the service's and the TypeScript client's of one release (the VERSION
// file; CHANGELOG.md says what each changed).
const Version = "0.5.0"
