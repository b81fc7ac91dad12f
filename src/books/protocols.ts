// Which protocol paid: the coarse answer a merchant reads beside the exact scheme (GET /calls, the dashboard,
// webhooks). A call row records its scheme; a claim records its kind, and an MPP authorization says so in
// its stored payload (`protocol: "mpp"`), since x402 `exact` and MPP `evm` charge move money the same way.

/** x402 (exact, upto), mpp (evm charge), tx-hash (a transfer sent, then named), channel (x402 batch-settlement vouchers), pass (a use of a pass bought before). */
export type Protocol = 'x402' | 'mpp' | 'tx-hash' | 'channel' | 'pass'

const BY_SCHEME: Record<string, Protocol> = {
  exact: 'x402',
  upto: 'x402',
  'mpp-charge': 'mpp',
  'tx-hash': 'tx-hash',
  'batch-settlement': 'channel',
  pass: 'pass',
}

/** The protocol of a scheme name as call rows record it; null for rows older than the record. */
export function protocolOf(scheme: string | null | undefined): Protocol | null {
  return scheme == null ? null : (BY_SCHEME[scheme] ?? null)
}

/** What an MPP authorization adds to its stored payload: the claim says it came by MPP. */
export const MPP_STORED = { protocol: 'mpp' } as const

/** The scheme of a claim, from its kind and stored authorization (null: not a payment this can name). */
export function claimScheme(kind: string, authorization: unknown): string | null {
  if (kind === 'tx') return 'tx-hash'
  if (kind === 'upto') return 'upto'
  if (kind === 'batch') return 'batch-settlement'
  if (kind === 'eip3009')
    return (authorization as { protocol?: unknown } | null)?.protocol === 'mpp' ? 'mpp-charge' : 'exact'
  return null
}
