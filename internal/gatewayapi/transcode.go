package gatewayapi

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The operator speaks the 0.1 messages (proto/v01) everywhere; a 0.0.x
// gateway is reached through a translation of each 0.1 request into its
// 0.0.x twin and of each 0.0.x response back (the hub-and-spoke scheme of
// Kubernetes API conversion). The two lines name nearly every field alike,
// so the translation copies field by field by name, and the differences
// are a table: renames, changed types, and fields one line does not have.
// A populated field with no counterpart and no entry is an error, never a
// silent loss, and TestTranscodeTablesCoverEveryDifference proves the
// tables cover every field of the messages the operator uses.

// direction says which way a message is translated.
type direction int

const (
	// toLegacy translates 0.1 requests (and what they carry) into 0.0.x.
	toLegacy direction = iota
	// fromLegacy translates 0.0.x responses (and what they carry) into 0.1.
	fromLegacy
)

// fieldRule handles one source field whose twin is not a same-named field
// of the same shape. Keys are canonical full names (see canonical).
type fieldRule struct {
	// rename is the destination field's name.
	rename protoreflect.Name
	// convert writes the value itself.
	convert func(v protoreflect.Value, dst protoreflect.Message) error
	// drop is why the field has no counterpart and may be left behind.
	drop string
}

// canonical strips the legacy package segment, so that both lines' names
// of one field compare equal ("openshell.legacy.v1.X.f" → "openshell.v1.X.f").
func canonical(n protoreflect.FullName) string {
	return strings.Replace(string(n), "openshell.legacy.", "openshell.", 1)
}

// rules are the differences between the lines, by direction and by the
// source field's canonical name.
var rules = map[direction]map[string]fieldRule{
	toLegacy: {
		// The workspace selector becomes the workspace string.
		"openshell.v1.CreateSandboxRequest.workspace_scope":          {convert: selectorToWorkspace},
		"openshell.v1.GetSandboxRequest.workspace_scope":             {convert: selectorToWorkspace},
		"openshell.v1.ListSandboxesRequest.workspace_scope":          {convert: selectorToWorkspace},
		"openshell.v1.DeleteSandboxRequest.workspace_scope":          {convert: selectorToWorkspace},
		"openshell.v1.StopSandboxRequest.workspace_scope":            {convert: selectorToWorkspace},
		"openshell.v1.StartSandboxRequest.workspace_scope":           {convert: selectorToWorkspace},
		"openshell.v1.WatchSandboxRequest.workspace_scope":           {drop: "0.0.x watches by the sandbox ID, which names its workspace"},
		"openshell.v1.AttachSandboxProviderRequest.workspace_scope":  {convert: selectorToWorkspace},
		"openshell.v1.DetachSandboxProviderRequest.workspace_scope":  {convert: selectorToWorkspace},
		"openshell.v1.ListSandboxProvidersRequest.workspace_scope":   {convert: selectorToWorkspace},
		"openshell.v1.CreateProviderRequest.workspace_scope":         {convert: selectorToWorkspace},
		"openshell.v1.GetProviderRequest.workspace_scope":            {convert: selectorToWorkspace},
		"openshell.v1.UpdateProviderRequest.workspace_scope":         {convert: selectorToWorkspace},
		"openshell.v1.DeleteProviderRequest.workspace_scope":         {convert: selectorToWorkspace},
		"openshell.v1.UpdateConfigRequest.workspace_scope":           {convert: selectorToWorkspace},
		"openshell.v1.GetSandboxPolicyStatusRequest.workspace_scope": {convert: selectorToWorkspace},
		// Renames.
		"openshell.v1.AttachSandboxProviderRequest.sandbox":  {rename: "sandbox_name"},
		"openshell.v1.AttachSandboxProviderRequest.provider": {rename: "provider_name"},
		"openshell.v1.DetachSandboxProviderRequest.sandbox":  {rename: "sandbox_name"},
		"openshell.v1.DetachSandboxProviderRequest.provider": {rename: "provider_name"},
		"openshell.v1.ListSandboxProvidersRequest.sandbox":   {rename: "sandbox_name"},
		"openshell.v1.UpdateConfigRequest.sandbox":           {rename: "name"},
		"openshell.v1.GetSandboxPolicyStatusRequest.sandbox": {rename: "name"},
		// Paging: 0.0.x pages by offset; the adapter's page token is one.
		"openshell.v1.ListSandboxesRequest.page_size":         {convert: int32ToUint32("limit")},
		"openshell.v1.ListSandboxesRequest.page_token":        {convert: tokenToOffset},
		"openshell.v1.ListSandboxProvidersRequest.page_size":  {drop: "0.0.x returns every attached provider at once"},
		"openshell.v1.ListSandboxProvidersRequest.page_token": {drop: "0.0.x returns every attached provider at once"},
		// Watch: the adapter resolves the name to the ID 0.0.x watches by.
		"openshell.v1.WatchSandboxRequest.sandbox":             {drop: "the adapter sets the sandbox ID"},
		"openshell.v1.WatchSandboxRequest.since_time":          {convert: timeToMillis("log_since_ms")},
		"openshell.v1.WatchSandboxRequest.resume_after_cursor": {convert: refuse("resuming a watch from a cursor needs a 0.1 gateway")},
		"openshell.v1.UpdateConfigRequest.setting_value":       {convert: refuse("a typed setting value needs a 0.1 gateway")},
		// 0.0.x has no idempotency keys or allow_missing: a retried create
		// answers AlreadyExists, which callers already handle, and the
		// adapter reads a missing object's NotFound as allow_missing asks.
		"openshell.v1.CreateSandboxRequest.request_id":                   {drop: "no idempotency keys in 0.0.x"},
		"openshell.v1.DeleteSandboxRequest.request_id":                   {drop: "no idempotency keys in 0.0.x"},
		"openshell.v1.DeleteSandboxRequest.allow_missing":                {drop: "the adapter maps NotFound"},
		"openshell.v1.StopSandboxRequest.request_id":                     {drop: "no idempotency keys in 0.0.x"},
		"openshell.v1.StartSandboxRequest.request_id":                    {drop: "no idempotency keys in 0.0.x"},
		"openshell.v1.AttachSandboxProviderRequest.request_id":           {drop: "no idempotency keys in 0.0.x"},
		"openshell.v1.DetachSandboxProviderRequest.request_id":           {drop: "no idempotency keys in 0.0.x"},
		"openshell.v1.CreateProviderRequest.request_id":                  {drop: "no idempotency keys in 0.0.x"},
		"openshell.v1.UpdateProviderRequest.request_id":                  {drop: "no idempotency keys in 0.0.x"},
		"openshell.v1.DeleteProviderRequest.request_id":                  {drop: "no idempotency keys in 0.0.x"},
		"openshell.v1.DeleteProviderRequest.allow_missing":               {drop: "the adapter maps NotFound"},
		"openshell.v1.UpdateConfigRequest.request_id":                    {drop: "no idempotency keys in 0.0.x"},
		"openshell.v1.CreateWorkspaceRequest.request_id":                 {drop: "no idempotency keys in 0.0.x"},
		"openshell.v1.DeleteWorkspaceRequest.request_id":                 {drop: "no idempotency keys in 0.0.x"},
		"openshell.v1.DeleteWorkspaceRequest.allow_missing":              {drop: "the adapter maps NotFound"},
		"openshell.v1.UpdateProviderRequest.credential_expiration_times": {convert: timesToMillis("credential_expires_at_ms")},
		// 0.0.x removes an expiry given as 0.
		"openshell.v1.UpdateProviderRequest.clear_credential_expiration_keys": {convert: clearToZeroMillis("credential_expires_at_ms")},
		"openshell.datamodel.v1.Provider.credential_expiration_times":         {convert: timesToMillis("credential_expires_at_ms")},
		"openshell.datamodel.v1.ObjectMeta.created_time":                      {convert: timeToMillis("created_at_ms")},
		"openshell.datamodel.v1.ObjectMeta.deletion_time":                     {convert: timeToMillis("deletion_timestamp_ms")},
		"openshell.v1.SandboxCondition.transition_time":                       {convert: timeToRFC3339("last_transition_time")},
		"openshell.v1.SandboxPolicyRevision.created_time":                     {convert: timeToMillis("created_at_ms")},
		"openshell.v1.SandboxPolicyRevision.loaded_time":                      {convert: timeToMillis("loaded_at_ms")},
		"openshell.v1.SandboxLogLine.event_time":                              {convert: timeToMillis("timestamp_ms")},
		// Workspace templates are a 0.1 feature.
		"openshell.v1.CreateSandboxRequest.workload_template": {convert: refuse("creating a sandbox from a workspace template needs a 0.1 gateway")},
		"openshell.v1.Sandbox.created_from_workload_template": {drop: "0.0.x has no workspace templates"},
		"openshell.sandbox.v1.NetworkEndpoint.mcp":            {convert: refuse("an MCP endpoint's options (spec.network rules' mcp) need a 0.1 gateway")},
		// Policy fields that 0.1 made enums were strings.
		"openshell.sandbox.v1.NetworkEndpoint.tls":         {convert: enumToString("tls", tlsModes)},
		"openshell.sandbox.v1.NetworkEndpoint.enforcement": {convert: enumToString("enforcement", enforcementModes)},
		"openshell.sandbox.v1.NetworkEndpoint.access":      {convert: enumToString("access", accessPresets)},
	},
	fromLegacy: {
		"openshell.datamodel.v1.ObjectMeta.created_at_ms":          {convert: millisToTime("created_time")},
		"openshell.datamodel.v1.ObjectMeta.deletion_timestamp_ms":  {convert: millisToTime("deletion_time")},
		"openshell.datamodel.v1.Provider.credential_expires_at_ms": {convert: millisToTimes("credential_expiration_times")},
		"openshell.v1.SandboxStatus.sandbox_name":                  {drop: "0.1 no longer reports the runtime object's name"},
		"openshell.v1.SandboxCondition.last_transition_time":       {convert: rfc3339ToTime("transition_time")},
		"openshell.v1.SandboxPolicyRevision.created_at_ms":         {convert: millisToTime("created_time")},
		"openshell.v1.SandboxPolicyRevision.loaded_at_ms":          {convert: millisToTime("loaded_time")},
		"openshell.v1.SandboxLogLine.timestamp_ms":                 {convert: millisToTime("event_time")},
		"openshell.v1.PlatformEvent.timestamp_ms":                  {convert: millisToTime("event_time")},
		"openshell.v1.DeleteSandboxResponse.deleted":               {drop: "the adapter sets the deletion outcome"},
		"openshell.v1.DeleteProviderResponse.deleted":              {drop: "the adapter sets the deletion outcome"},
		"openshell.v1.DeleteWorkspaceResponse.deleted":             {drop: "the adapter sets the deletion outcome"},
		"openshell.sandbox.v1.NetworkEndpoint.tls":                 {convert: stringToEnum("tls", tlsModes)},
		"openshell.sandbox.v1.NetworkEndpoint.enforcement":         {convert: stringToEnum("enforcement", enforcementModes)},
		"openshell.sandbox.v1.NetworkEndpoint.access":              {convert: stringToEnum("access", accessPresets)},
		"openshell.sandbox.v1.NetworkBinary.harness":               {drop: "0.1 removed harness binaries"},
	},
}

// The 0.0.x strings of the fields 0.1 made enums, by enum value number.
var (
	tlsModes         = map[protoreflect.EnumNumber]string{1: "skip", 2: "terminate", 3: "passthrough"}
	enforcementModes = map[protoreflect.EnumNumber]string{1: "enforce", 2: "audit"}
	accessPresets    = map[protoreflect.EnumNumber]string{1: "read-only", 2: "read-write", 3: "full"}
)

// transcode copies every populated field of src into dst, which must be
// src's twin on the other line.
func transcode(d direction, src, dst protoreflect.Message) error {
	var err error
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		err = transcodeField(d, fd, v, dst)
		return err == nil
	})
	return err
}

func transcodeField(d direction, fd protoreflect.FieldDescriptor, v protoreflect.Value, dst protoreflect.Message) error {
	name := fd.Name()
	if r, ok := rules[d][canonical(fd.FullName())]; ok {
		switch {
		case r.drop != "":
			return nil
		case r.convert != nil:
			return r.convert(v, dst)
		}
		name = r.rename
	}
	dfd := dst.Descriptor().Fields().ByName(name)
	if dfd == nil {
		return fmt.Errorf("field %s has no counterpart in %s", canonical(fd.FullName()), dst.Descriptor().FullName())
	}
	if fd.Kind() != dfd.Kind() || fd.Cardinality() != dfd.Cardinality() || fd.IsMap() != dfd.IsMap() {
		return fmt.Errorf("field %s differs in type from %s", canonical(fd.FullName()), dfd.FullName())
	}
	switch {
	case fd.IsMap():
		src, out := v.Map(), dst.Mutable(dfd).Map()
		var err error
		src.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			var cv protoreflect.Value
			if cv, err = value(d, fd.MapValue(), dfd.MapValue(), mv, out.NewValue); err == nil {
				out.Set(k, cv)
			}
			return err == nil
		})
		return err
	case fd.IsList():
		src, out := v.List(), dst.Mutable(dfd).List()
		for i := 0; i < src.Len(); i++ {
			cv, err := value(d, fd, dfd, src.Get(i), out.NewElement)
			if err != nil {
				return err
			}
			out.Append(cv)
		}
		return nil
	}
	cv, err := value(d, fd, dfd, v, func() protoreflect.Value { return dst.NewField(dfd) })
	if err != nil {
		return err
	}
	dst.Set(dfd, cv)
	return nil
}

// value translates one singular value (a list element or map value too);
// newMsg makes the destination message a message value is copied into.
func value(d direction, fd, dfd protoreflect.FieldDescriptor, v protoreflect.Value, newMsg func() protoreflect.Value) (protoreflect.Value, error) {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		out := newMsg()
		if err := transcode(d, v.Message(), out.Message()); err != nil {
			return protoreflect.Value{}, err
		}
		return out, nil
	case protoreflect.EnumKind:
		// Enum values match by name (and every shared one by number too);
		// a value the other line lacks cannot be sent or read there.
		sv := fd.Enum().Values().ByNumber(v.Enum())
		if sv == nil && d == fromLegacy && dfd.Enum().Values().ByNumber(v.Enum()) != nil {
			// proto3 enums are open: a number the 0.0.x enum does not name
			// is read as the 0.1 value of that number.
			return v, nil
		}
		if sv == nil {
			return protoreflect.Value{}, fmt.Errorf("%s has no value %d", fd.Enum().FullName(), v.Enum())
		}
		dv := dfd.Enum().Values().ByName(sv.Name())
		if dv == nil {
			return protoreflect.Value{}, fmt.Errorf("%s has no %s on the other gateway line", dfd.Enum().FullName(), sv.Name())
		}
		return protoreflect.ValueOfEnum(dv.Number()), nil
	}
	return v, nil
}

// set writes a scalar into the named field of dst.
func set(dst protoreflect.Message, name protoreflect.Name, v protoreflect.Value) error {
	fd := dst.Descriptor().Fields().ByName(name)
	if fd == nil {
		return fmt.Errorf("%s has no field %s", dst.Descriptor().FullName(), name)
	}
	dst.Set(fd, v)
	return nil
}

// selectorToWorkspace writes a WorkspaceSelector as 0.0.x's workspace
// string, or its all_workspaces flag where the request has one.
func selectorToWorkspace(v protoreflect.Value, dst protoreflect.Message) error {
	sel := v.Message()
	fields := sel.Descriptor().Fields()
	if sel.Has(fields.ByName("all_workspaces")) {
		if dst.Descriptor().Fields().ByName("all_workspaces") == nil {
			return fmt.Errorf("%s cannot select all workspaces on a 0.0.x gateway", dst.Descriptor().FullName())
		}
		return set(dst, "all_workspaces", protoreflect.ValueOfBool(true))
	}
	return set(dst, "workspace", sel.Get(fields.ByName("workspace")))
}

func int32ToUint32(name protoreflect.Name) func(protoreflect.Value, protoreflect.Message) error {
	return func(v protoreflect.Value, dst protoreflect.Message) error {
		n := v.Int()
		if n < 0 {
			return fmt.Errorf("negative %s", name)
		}
		return set(dst, name, protoreflect.ValueOfUint32(uint32(n)))
	}
}

// tokenToOffset reads the legacy adapter's page token, the offset of the
// next page as a decimal number (see NextPageToken).
func tokenToOffset(v protoreflect.Value, dst protoreflect.Message) error {
	if v.String() == "" {
		return nil
	}
	n, err := strconv.ParseUint(v.String(), 10, 32)
	if err != nil {
		return fmt.Errorf("page token %q was not issued for a 0.0.x gateway", v.String())
	}
	return set(dst, "offset", protoreflect.ValueOfUint32(uint32(n)))
}

func refuse(why string) func(protoreflect.Value, protoreflect.Message) error {
	// Called for populated fields only: whatever the field holds has no
	// twin.
	return func(protoreflect.Value, protoreflect.Message) error {
		return fmt.Errorf("%s", why)
	}
}

func millis(v protoreflect.Value) int64 {
	return v.Message().Interface().(*timestamppb.Timestamp).AsTime().UnixMilli()
}

func timestamp(ms int64) *timestamppb.Timestamp { return timestamppb.New(time.UnixMilli(ms)) }

func timeToMillis(name protoreflect.Name) func(protoreflect.Value, protoreflect.Message) error {
	return func(v protoreflect.Value, dst protoreflect.Message) error {
		return set(dst, name, protoreflect.ValueOfInt64(millis(v)))
	}
}

func millisToTime(name protoreflect.Name) func(protoreflect.Value, protoreflect.Message) error {
	return func(v protoreflect.Value, dst protoreflect.Message) error {
		if v.Int() <= 0 {
			return nil
		}
		return set(dst, name, protoreflect.ValueOfMessage(timestamp(v.Int()).ProtoReflect()))
	}
}

func timesToMillis(name protoreflect.Name) func(protoreflect.Value, protoreflect.Message) error {
	return func(v protoreflect.Value, dst protoreflect.Message) error {
		out := dst.Mutable(dst.Descriptor().Fields().ByName(name)).Map()
		v.Map().Range(func(k protoreflect.MapKey, t protoreflect.Value) bool {
			out.Set(k, protoreflect.ValueOfInt64(millis(t)))
			return true
		})
		return nil
	}
}

func clearToZeroMillis(name protoreflect.Name) func(protoreflect.Value, protoreflect.Message) error {
	return func(v protoreflect.Value, dst protoreflect.Message) error {
		out := dst.Mutable(dst.Descriptor().Fields().ByName(name)).Map()
		for i := 0; i < v.List().Len(); i++ {
			out.Set(protoreflect.ValueOfString(v.List().Get(i).String()).MapKey(), protoreflect.ValueOfInt64(0))
		}
		return nil
	}
}

func millisToTimes(name protoreflect.Name) func(protoreflect.Value, protoreflect.Message) error {
	return func(v protoreflect.Value, dst protoreflect.Message) error {
		out := dst.Mutable(dst.Descriptor().Fields().ByName(name)).Map()
		v.Map().Range(func(k protoreflect.MapKey, ms protoreflect.Value) bool {
			if ms.Int() > 0 {
				out.Set(k, protoreflect.ValueOfMessage(timestamp(ms.Int()).ProtoReflect()))
			}
			return true
		})
		return nil
	}
}

func timeToRFC3339(name protoreflect.Name) func(protoreflect.Value, protoreflect.Message) error {
	return func(v protoreflect.Value, dst protoreflect.Message) error {
		t := v.Message().Interface().(*timestamppb.Timestamp).AsTime()
		return set(dst, name, protoreflect.ValueOfString(t.UTC().Format(time.RFC3339Nano)))
	}
}

// rfc3339ToTime reads a 0.0.x condition time; one that does not parse is
// left out (it is informational).
func rfc3339ToTime(name protoreflect.Name) func(protoreflect.Value, protoreflect.Message) error {
	return func(v protoreflect.Value, dst protoreflect.Message) error {
		t, err := time.Parse(time.RFC3339Nano, v.String())
		if err != nil {
			return nil
		}
		return set(dst, name, protoreflect.ValueOfMessage(timestamppb.New(t).ProtoReflect()))
	}
}

func enumToString(name protoreflect.Name, values map[protoreflect.EnumNumber]string) func(protoreflect.Value, protoreflect.Message) error {
	return func(v protoreflect.Value, dst protoreflect.Message) error {
		s, ok := values[v.Enum()]
		if !ok {
			return fmt.Errorf("%s value %d has no 0.0.x spelling", name, v.Enum())
		}
		return set(dst, name, protoreflect.ValueOfString(s))
	}
}

// stringToEnum reads a 0.0.x policy string as its 0.1 enum. It reads
// responses only (the policy a gateway holds, which another client may
// have written): a spelling 0.1 has no value for is left unset, with the
// gateway's default, rather than failing a whole sandbox the operator
// only needs the status of. Requests never take this way: what the
// operator sends is translated by enumToString, which refuses.
func stringToEnum(name protoreflect.Name, values map[protoreflect.EnumNumber]string) func(protoreflect.Value, protoreflect.Message) error {
	return func(v protoreflect.Value, dst protoreflect.Message) error {
		for n, s := range values {
			if strings.EqualFold(s, v.String()) {
				return set(dst, name, protoreflect.ValueOfEnum(n))
			}
		}
		return nil
	}
}

// ToLegacy translates a 0.1 message (a request, or what requests carry)
// into its 0.0.x twin dst.
func ToLegacy(src, dst proto.Message) error {
	return transcode(toLegacy, src.ProtoReflect(), dst.ProtoReflect())
}

// FromLegacy translates a 0.0.x message (a response, an event, or what
// they carry) into its 0.1 twin dst.
func FromLegacy(src, dst proto.Message) error {
	return transcode(fromLegacy, src.ProtoReflect(), dst.ProtoReflect())
}
