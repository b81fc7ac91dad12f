// Counts identity outcomes with bounded labels: the signer label is one of the operator's configured names
// (the verifier only ever returns those), 'none'/'unsigned', or 'other'; a reason is one of the declared
// failure codes, an action one of the rules' actions.
import { agentCalls, agentIdentity, agentRevenueAtomic } from '../observability/metrics.ts'
import type { CallAgent } from './call-agent.ts'
import type { Identity } from './verify-request.ts'

export function countIdentity(signerNames: ReadonlySet<string>, identity: Identity): void {
  if (identity.status === 'verified') {
    agentIdentity.labels(signerNames.has(identity.signer) ? identity.signer : 'none', 'verified').inc()
    return
  }
  agentIdentity.labels('none', identity.status === 'unsigned' ? 'unsigned' : identity.reason).inc()
}

/** The signer label of the per-identity counts: a configured name, 'unsigned', or 'other' for anything else. */
export function signerLabel(signerNames: ReadonlySet<string>, signer: string): string {
  if (signer === 'unsigned') return signer
  return signerNames.has(signer) ? signer : 'other'
}

/** One call decided by the rules (a blocked one has action 'block'). */
export function countAgentCall(signerNames: ReadonlySet<string>, signer: string, action: string): void {
  agentCalls.labels(signerLabel(signerNames, signer), action).inc()
}

/** What a call to an endpoint with identity rules was charged, once captured. */
export function countAgentRevenue(signerNames: ReadonlySet<string>, agent: CallAgent, atomic: bigint): void {
  agentRevenueAtomic.labels(signerLabel(signerNames, agent.signer)).inc(Number(atomic))
}
