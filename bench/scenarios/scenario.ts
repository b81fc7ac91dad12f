// One bench scenario: what it needs started, how many proofs it uses, and one load run.
import type { Measured } from '../load.ts'
import type { Context, TollgateKind } from './context.ts'

export interface Scenario {
  name: string
  /** Tollgate instances it needs; peers are named by `peer`. */
  tollgates?: TollgateKind[]
  peer?: 'bare-uws' | 'bare-relay' | 'nginx' | 'x402-reference' | 'mpp-reference'
  proofs?: number
  /**
   * Load run before the measured one, outside its CPU meter: the scenario's own path (the recovery, the
   * chain reads, the settlement) compiled and connected, as `paid-warm`'s is by the runs before it.
   */
  warmUp?(ctx: Context): Promise<void>
  /** Work for the measured run done before the quiet wait, outside its CPU meter (mppx's credentials). */
  prepare?(ctx: Context): Promise<void>
  run(ctx: Context): Promise<Measured | { skipped: string }>
}
