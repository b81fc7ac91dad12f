// Counts identity outcomes with bounded labels: the signer label is one of the operator's configured names
// (the verifier only ever returns those) or 'none'; a reason is one of the declared failure codes.
import { agentIdentity } from '../observability/metrics.ts'
import type { Identity } from './verify-request.ts'

export function countIdentity(signerNames: ReadonlySet<string>, identity: Identity): void {
  if (identity.status === 'verified') {
    agentIdentity.labels(signerNames.has(identity.signer) ? identity.signer : 'none', 'verified').inc()
    return
  }
  agentIdentity.labels('none', identity.status === 'unsigned' ? 'unsigned' : identity.reason).inc()
}
