// What the claim/capture statement benches share: the backend's CPU read from /proc, and the capture a
// claimed call records, as the data plane builds it.
import { readFileSync } from 'node:fs'
import type { Capture, ClaimRequest } from '../../src/books/claims.ts'

const TICK_US = 1e6 / 100 // USER_HZ

/** The backend's user+system CPU so far, µs (fields 14 and 15 of /proc/<pid>/stat). */
export function backendCpuUs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) * TICK_US
}

/**
 * The capture of a claimed call, 95 % to the owner. `horizonAt` as the data plane passes it: the claim's day
 * partition, so the capture probes that one.
 */
export function captureOf(c: ClaimRequest, horizonAt: string | null, scheme?: string): Capture {
  return {
    callId: c.targetId,
    proofKey: c.proofKey,
    endpointId: 'ep_1',
    accountId: 'acct_1',
    ownerWallet: '0xowner',
    payer: c.payer,
    amountAtomic: c.amountAtomic,
    ownerShareAtomic: 9_500n,
    feeAtomic: 500n,
    upstreamStatus: 200,
    method: 'GET',
    ...(scheme === undefined ? {} : { scheme }),
    horizonAt,
  }
}
