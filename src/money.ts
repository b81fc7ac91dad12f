// Dollars ↔ USDC base units (bigint). No floating-point money past this file.

/** USDC has 6 decimals: 1 dollar = 1_000_000 base units. */
const UNIT = 1_000_000n
const DECIMAL = /^(0|[1-9]\d*)(?:\.(\d{1,6}))?$/

export type ParseAmountResult = { ok: true; atomic: bigint } | { ok: false; reason: string }

/**
 * Parses an API amount (JSON number or decimal string, in dollars) into base units, at most `maxAtomic`.
 * The number is read through its shortest decimal text (what JSON.parse saw), never multiplied as a float.
 */
export function parseDollars(input: unknown, maxAtomic?: bigint): ParseAmountResult {
  let text: string
  if (typeof input === 'number') {
    if (!Number.isFinite(input)) return { ok: false, reason: 'must be a finite number' }
    // Number → shortest round-trip text; exponent forms (1e-7, 1e21) are outside what we accept anyway.
    text = String(input)
  } else if (typeof input === 'string') {
    text = input.trim()
  } else {
    return { ok: false, reason: 'must be a number of dollars or a decimal string' }
  }
  const tooLarge =
    maxAtomic === undefined
      ? null
      : { ok: false as const, reason: `must be at most ${formatDollars(maxAtomic)}` }
  const m = DECIMAL.exec(text)
  if (!m) {
    if (/^-/.test(text)) return { ok: false, reason: 'must be greater than 0' }
    if (/^\d+\.\d{7,}$/.test(text) || /e-/i.test(text))
      return { ok: false, reason: 'must have at most 6 decimal places' }
    // 1e30 or "1e30": what is wrong with it is its size, so say the limit (the float is only compared).
    const approx = Number(text)
    if (tooLarge !== null && /^\d/.test(text) && approx > Number(formatDollars(maxAtomic!))) return tooLarge
    return { ok: false, reason: 'must be a decimal amount of dollars, e.g. 0.01' }
  }
  const atomic = BigInt(m[1]!) * UNIT + BigInt((m[2] ?? '').padEnd(6, '0'))
  if (atomic <= 0n) return { ok: false, reason: 'must be greater than 0' }
  if (tooLarge !== null && atomic > maxAtomic!) return tooLarge
  return { ok: true, atomic }
}

/** Base units → dollars as a JSON number (exact for any amount below 2^53 base units, i.e. $9 billion). */
export function toDollars(atomic: bigint): number {
  return Number(formatDollars(atomic))
}

/** Base units → decimal text without trailing zeros ("0.01", "12.5", "3"). */
export function formatDollars(atomic: bigint): string {
  const negative = atomic < 0n
  const abs = negative ? -atomic : atomic
  const whole = abs / UNIT
  const frac = (abs % UNIT).toString().padStart(6, '0').replace(/0+$/, '')
  return `${negative ? '-' : ''}${whole}${frac ? `.${frac}` : ''}`
}

/** Dollars from configuration (trusted, few decimals) → base units. */
export function configDollars(dollars: number): bigint {
  const r = parseDollars(dollars)
  if (r.ok) return r.atomic
  if (dollars === 0) return 0n
  throw new RangeError(`not a valid dollar amount: ${dollars}`)
}

export interface Split {
  owner: bigint
  fee: bigint
}

/** The owner's share rounded down to the base unit; the fee is the rest, so owner + fee === amount always. */
export function splitOwnerShare(amount: bigint, ownerShareBps: number): Split {
  const owner = (amount * BigInt(ownerShareBps)) / 10_000n
  return { owner, fee: amount - owner }
}

/**
 * A price scaled by an identity rule's multiplier, given in basis points (10_000 = ×1). Rounded up to the
 * base unit: a discount never turns a paid call into a free one by rounding (free is its own action).
 */
export function scaleByBps(atomic: bigint, multiplierBps: number): bigint {
  const bps = BigInt(multiplierBps)
  return (atomic * bps + 9_999n) / 10_000n
}
