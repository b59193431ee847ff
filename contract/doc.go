// Package contract is compactor's public contract, each fact written once:
// what a runtime, a client or an operator's tool needs to talk to the
// service over NATS, and nothing of how the service does it. It imports
// the standard library only, so that a client importing it carries no more
// than nats.go.
//
//   - Endpoints (micro service [ServiceName]): the Subject constants, their
//     request bodies ([CompactBody], [ResultRequest], [UploadBody],
//     [PagedBody]) and answers read in parts ([AnswerPart], [MessagePart],
//     [Digest]); an error answer's headers ([HeaderErrorCode],
//     [HeaderError]), [Code] and [ErrorBody] with its [Status].
//   - Events (CloudEvents, SPEC §8): the Type constants, the [Routes] table
//     (type, subject prefix, who publishes it, the trigger of a request, the
//     JSON Schema of its data), the streams ([RequestStream],
//     [ResultStream], [DLQStream]) and their subjects, the request's data
//     ([RequestData]), the [Trigger] values, the result ids a request
//     determines ([RequestResultID], [FailedResultID]), and a small codec of
//     the NATS protocol binding ([Event], [EncodeBinary], [DecodeEvent]).
//   - Sessions: the session-id rule ([ValidSessionID], [CheckSessionID],
//     [ErrSessionID]) and the limits of a call ([MaxMessagesPerCall],
//     [MaxUploadPartBytes], [MaxUploadParts]).
//
// `compactor contract --json` prints these facts ([Facts]); the TypeScript
// client's test reads them from there.
package contract
