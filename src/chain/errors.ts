// Unexpected chain failures (start-up, configuration): typed, with a stable code docs/api.md documents.
// Expected per-request outcomes (payment_pending, wrong_asset, …) are values, never these.

export type ChainErrorCode =
  | 'TOLLGATE_ANVIL_NOT_FOUND'
  | 'TOLLGATE_ANVIL_START_FAILED'
  | 'TOLLGATE_CHAIN_RPC_URL_REQUIRED'
  | 'TOLLGATE_CHAIN_USDC_ADDRESS_REQUIRED'
  | 'TOLLGATE_CHAIN_USDC_ADDRESS_INVALID'
  | 'TOLLGATE_CHAIN_TREASURY_KEY_REQUIRED'
  | 'TOLLGATE_CHAIN_TREASURY_KEY_INVALID'
  | 'TOLLGATE_CHAIN_RPC_UNREACHABLE'
  | 'TOLLGATE_CHAIN_ID_MISMATCH'
  | 'TOLLGATE_CHAIN_USDC_UNREADABLE'
  | 'TOLLGATE_CHAIN_USDC_DECIMALS'

export class ChainError extends Error {
  override readonly name = 'ChainError'
  readonly code: ChainErrorCode

  constructor(code: ChainErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.code = code
  }
}
