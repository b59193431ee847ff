package events

import (
	"encoding/json"
	"fmt"
	"strings"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"

	"github.com/compactor/compactor/contract"
)

// The NATS protocol binding of CloudEvents (nats-protocol-binding.md,
// version 1.0.3): binary mode puts every attribute, extensions included,
// in a header named ce-<attribute>; structured mode is the JSON event
// format as the payload.

// DecodeEvent reads the CloudEvent a NATS message carries, in either
// content mode, and validates its attributes. In binary mode every ce-
// header is an attribute (names case-insensitive, values decoded by
// DecodeHeaderValue); ce-datacontenttype gives the data's type, and
// Content-Type does where it is absent. An attribute given twice with
// different values is an error.
func DecodeEvent(h map[string][]string, body []byte) (cloudevents.Event, error) {
	mode, ok := contract.ModeOf(h, body)
	if !ok {
		return cloudevents.Event{}, fmt.Errorf("not a CloudEvent: no ce- headers, no application/cloudevents content type and no JSON event body")
	}
	if mode == contract.Structured {
		if ct, _ := contract.Header(h, "Content-Type"); strings.HasPrefix(strings.ToLower(ct), "application/cloudevents-batch") {
			return cloudevents.Event{}, fmt.Errorf("batch mode is not part of the NATS binding")
		}
		var ev cloudevents.Event
		if err := json.Unmarshal(body, &ev); err != nil {
			return ev, fmt.Errorf("structured event: %v", err)
		}
		if v := ev.SpecVersion(); v != cloudevents.CloudEventsVersionV1 {
			return ev, fmt.Errorf("specversion %q is not %s", v, cloudevents.CloudEventsVersionV1)
		}
		return ev, validate(ev)
	}
	attrs, err := contract.BinaryAttributes(h)
	if err != nil {
		return cloudevents.Event{}, err
	}
	spec, ok := attrs["specversion"]
	if !ok {
		return cloudevents.Event{}, fmt.Errorf("binary mode without a ce-specversion header")
	}
	if spec != cloudevents.CloudEventsVersionV1 {
		return cloudevents.Event{}, fmt.Errorf("specversion %q is not %s", spec, cloudevents.CloudEventsVersionV1)
	}
	ev := cloudevents.New(spec)
	for name, val := range attrs {
		if err := setAttr(&ev, name, val); err != nil {
			return ev, fmt.Errorf("header %s%s: %v", contract.HeaderPrefix, name, err)
		}
	}
	if _, ok := attrs["datacontenttype"]; !ok {
		if ct, ok := contract.Header(h, "Content-Type"); ok {
			ev.SetDataContentType(strings.TrimSpace(ct))
		}
	}
	if len(body) > 0 {
		ev.DataEncoded = body
	}
	return ev, validate(ev)
}

func validate(ev cloudevents.Event) error {
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("not a valid CloudEvent: %s", strings.Join(strings.Fields(err.Error()), " "))
	}
	return nil
}

func setAttr(ev *cloudevents.Event, name, val string) error {
	switch name {
	case "specversion":
	case "id":
		ev.SetID(val)
	case "source":
		ev.SetSource(val)
	case "type":
		ev.SetType(val)
	case "subject":
		ev.SetSubject(val)
	case "dataschema":
		ev.SetDataSchema(val)
	case "datacontenttype":
		ev.SetDataContentType(val)
	case "time":
		t, err := types.ParseTime(val)
		if err != nil {
			return err
		}
		ev.SetTime(t)
	default:
		if err := ev.Context.SetExtension(name, val); err != nil {
			return err
		}
	}
	return nil
}

// EncodeBinary writes an event in binary mode, as contract.EncodeBinary
// does, its extensions in their canonical strings.
func EncodeBinary(ev cloudevents.Event) (map[string][]string, []byte) {
	c := contract.Event{ID: ev.ID(), Source: ev.Source(), Type: ev.Type(), Subject: ev.Subject(), Time: ev.Time(),
		DataContentType: ev.DataContentType(), DataSchema: ev.DataSchema(), Data: ev.Data()}
	for name, v := range ev.Extensions() {
		s, err := types.Format(v)
		if err != nil {
			continue // Validate refuses such an event before it is sent
		}
		if c.Extensions == nil {
			c.Extensions = map[string]string{}
		}
		c.Extensions[name] = s
	}
	return contract.EncodeBinary(c)
}
