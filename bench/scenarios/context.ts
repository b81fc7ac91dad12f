// What scenarios share in one run: settings, the chain, the started targets, the payment proofs.
import type { DevChain } from '../../src/chain/dev-chain.ts'
import type { AgentDirectory } from '../targets/agent-directory.ts'
import type { Target } from '../targets/target.ts'
import type { Tollgate } from '../targets/tollgate.ts'

export const settings = {
  durationS: Number(process.env.BENCH_DURATION_S ?? 5),
  connections: Number(process.env.BENCH_CONNECTIONS ?? 32),
  /** Proofs per paid scenario (each pays one call once): enough for the duration at a few thousand req/s. */
  proofs: Number(process.env.BENCH_PROOFS ?? 12_000),
}

/** receipts: signs offers and receipts; limited: rate limits at their defaults (the feature runs). */
export type TollgateKind = 'warm' | 'cold' | 'tsx' | 'workers2' | 'soak' | 'receipts' | 'limited'

export interface Context {
  dir: string
  chain: DevChain
  upstream: Target
  bare: Target | null
  /** tollgate's proxy() alone in a bare uWS app (no payment work), when a scenario needs it. */
  relay: Target | null
  nginx: Target | null
  /** The x402 reference middleware (Express + in-process facilitator), when a scenario needs it. */
  x402Reference: Target | null
  /** MPP's reference server (mppx/express, settling each call on anvil), when a scenario needs it. */
  mppReference: Target | null
  tollgates: Partial<Record<TollgateKind, Tollgate>>
  /** The signed-agent scenario's agent and key directory (the warm instance trusts it), when chosen. */
  agent: AgentDirectory | null
  /** Results so far by scenario name (half-load reads paid-warm's saturation rate). */
  rps: Map<string, number>
  /** Unused transfer proofs (each pays one call, once). */
  proofPool: string[]
  /** Takes n unused transfer proofs. */
  takeProofs(n: number): string[]
}
