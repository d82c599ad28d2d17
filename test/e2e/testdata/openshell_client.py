"""Reads the operator's sandboxes with the real `openshell` Python SDK.

Run by test/e2e (TestOpenShellPythonClient) with the SDK of the pinned
release (bin/openshell-wheel) and its runtime (bin/python-sdk) on
PYTHONPATH: a client no one here wrote, speaking the release's wire, as a
workspace user. Prints what it saw as one JSON object. The SDK has no
wrapper for the policy advisor's draft RPCs, so those are called on its own
generated stub, over its own authenticated channel, as is the provider
refresh status.
"""

import json
import os
import pathlib

from openshell import SandboxClient, TlsConfig
from openshell._proto import datamodel_pb2, openshell_pb2


def main() -> None:
    env = os.environ
    tls = TlsConfig(ca_path=pathlib.Path(env["OPENSHELL_CA"]))
    with SandboxClient(env["OPENSHELL_ENDPOINT"], tls=tls, bearer_token=env["OPENSHELL_TOKEN"]) as client:
        workspace = env["OPENSHELL_WORKSPACE"]
        listed = client.list_all(workspace=workspace, page_size=1)
        got = client.get(env["OPENSHELL_SANDBOX"], workspace=workspace)
        templates = client.sandbox_templates().list_all(workspace=workspace, page_size=1)
        scope = datamodel_pb2.WorkspaceSelector(workspace=workspace)
        draft = client._stub.GetDraftPolicy(openshell_pb2.GetDraftPolicyRequest(
            sandbox=got.name, workspace_scope=scope))
        history = client._stub.GetDraftHistory(openshell_pb2.GetDraftHistoryRequest(
            sandbox=got.name, workspace_scope=scope))
        # A provider's refresh status (OPENSHELL_PROVIDER), as any
        # workspace user may read it: what the gateway minted, never how.
        refresh = {}
        if env.get("OPENSHELL_PROVIDER"):
            got_refresh = client._stub.GetProviderRefreshStatus(openshell_pb2.GetProviderRefreshStatusRequest(
                provider=env["OPENSHELL_PROVIDER"], workspace_scope=scope))
            refresh = {c.credential_key: {"status": c.status, "strategy": c.strategy,
                                          "lastRefresh": c.last_refresh_time.seconds}
                       for c in got_refresh.credentials}
        print(json.dumps({
            "listed": sorted(s.name for s in listed),
            "name": got.name,
            "id": got.id,
            "workspace": got.workspace,
            "phase": got.phase,
            "labels": dict(got.labels),
            # The workspace templates the operator made, and which sandbox
            # was created from which.
            "templates": {t.metadata.name: t.spec.workload.image for t in templates},
            "createdFrom": {s.name: s.created_from_workload_template.name
                            for s in listed if s.created_from_workload_template is not None},
            # The sandbox's draft (every chunk: status and the reason it was
            # closed with) and its history as the gateway keeps it.
            "drafts": {c.id: {"status": c.status, "rule": c.rule_name, "reason": c.rejection_reason}
                       for c in draft.chunks},
            "history": [[e.chunk_id, e.event_type] for e in history.entries],
            "refresh": refresh,
        }))


if __name__ == "__main__":
    main()
