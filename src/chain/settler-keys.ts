// The settler keys: N slots derived from one secret, so every data-plane process (worker or instance) can
// own one without configuring N keys. Slot i's key is keccak256(domain ‖ seed ‖ i); the seed is
// SETTLER_PRIVATE_KEY when set (its own key is slot 0, as before slots existed), else derived from the
// treasury key under a domain separator (zero configuration). A settler key holds gas only: the money moves
// from the payer to the treasury whoever submits the authorization.
import { concat, type Hex, keccak256, numberToHex, toHex } from 'viem'

const SEED_DOMAIN = toHex('tollgate/x402-settler-seed/v1')
const SLOT_DOMAIN = toHex('tollgate/x402-settler-slot/v1')

/** secp256k1's group order: a private key must lie in [1, n). */
const SECP256K1_N = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n

export interface SettlerSeed {
  /** SETTLER_PRIVATE_KEY, or null. */
  settlerKey: Hex | null
  /** The treasury's key (configured, or the dev chain's account 0 on NETWORK=local). */
  treasuryKey: Hex | null
}

/** Whether the keys come from SETTLER_PRIVATE_KEY (operator-funded) or the treasury (derived). */
export function settlerSeedSource(seed: SettlerSeed): 'settler_key' | 'treasury_key' | null {
  if (seed.settlerKey !== null) return 'settler_key'
  return seed.treasuryKey !== null ? 'treasury_key' : null
}

/** The key of one slot; null when there is no secret to derive it from. Never the treasury's key. */
export function settlerSlotKey(seed: SettlerSeed, slot: number): Hex | null {
  if (seed.settlerKey !== null && slot === 0) return seed.settlerKey
  const root =
    seed.settlerKey ?? (seed.treasuryKey === null ? null : keccak256(concat([SEED_DOMAIN, seed.treasuryKey])))
  if (root === null) return null
  // A hash outside [1, n) is astronomically unlikely; rehash rather than hand out an invalid key.
  for (let k = keccak256(concat([SLOT_DOMAIN, root, numberToHex(slot, { size: 4 })])); ; k = keccak256(k)) {
    const v = BigInt(k)
    if (v > 0n && v < SECP256K1_N) return k
  }
}
