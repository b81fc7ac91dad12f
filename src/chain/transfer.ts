// What the chain proves about a payment transaction, shared by the verifier and the watcher, and the
// decoding of the ERC-20 Transfer logs it is built from.
import { type Address, getAddress, type Hash, type Log, toEventSelector } from 'viem'
import { transferEvent } from './usdc.ts'

/** The USDC one transaction moved to the treasury. */
export interface TreasuryTransfer {
  hash: Hash
  /** The payer: sender of the first USDC Transfer to the treasury (not the relayer that sent the tx). */
  from: Address
  /** Who sent the transaction (the payer, a relayer, or tollgate itself: its settlements). */
  sender: Address
  /** Sum of all USDC Transfer values to the treasury in the transaction, in base units. */
  value: bigint
  /**
   * The EIP-3009 authorizations that made those transfers (the token logged AuthorizationUsed for a payer
   * of one in the same transaction); empty for plain transfers. Such money belongs to its authorization (an
   * x402 or MPP payment, claimed by its nonce), whoever sent the transaction: the payer submitting it
   * themselves after being served by it, or anyone copying it from a pending settlement.
   */
  authorizations: readonly UsedAuthorization[]
  blockNumber: bigint
  timestampMs: number
}

export interface TransferLog {
  token: Address
  from: Address
  to: Address
  value: bigint
}

export const TRANSFER_TOPIC = toEventSelector(transferEvent)
export const AUTHORIZATION_USED_TOPIC = toEventSelector('AuthorizationUsed(address,bytes32)')

/** One EIP-3009 authorization the token logged used: its signer and nonce (lowercase hex). */
export interface UsedAuthorization {
  authorizer: Address
  nonce: string
}

/**
 * The authorizations `token` logged used in these logs (one transaction's) whose authorizer is one of
 * `payers`: the transfers from those payers were made by them (FiatToken logs AuthorizationUsed, then the
 * Transfer, in transferWithAuthorization and receiveWithAuthorization).
 */
export function authorizationsOf(
  logs: ReadonlyArray<Pick<Log, 'address' | 'topics'>>,
  token: string,
  payers: ReadonlySet<string>,
): UsedAuthorization[] {
  const used: UsedAuthorization[] = []
  for (const log of logs) {
    const [topic, authorizerTopic, nonce] = log.topics
    if (topic !== AUTHORIZATION_USED_TOPIC || !authorizerTopic || !nonce) continue
    if (!sameAddress(log.address, token)) continue
    const authorizer = topicAddress(authorizerTopic)
    if (payers.has(authorizer.toLowerCase())) used.push({ authorizer, nonce: nonce.toLowerCase() })
  }
  return used
}

/**
 * An ERC-20 Transfer, or null. ERC-721 shares the signature but indexes the token id (4 topics, no data):
 * that is not money and must not count.
 */
export function decodeTransferLog(log: Pick<Log, 'address' | 'topics' | 'data'>): TransferLog | null {
  const [topic, fromTopic, toTopic] = log.topics
  if (topic !== TRANSFER_TOPIC || log.topics.length !== 3 || !fromTopic || !toTopic) return null
  if (log.data.length !== 66) return null
  return {
    token: log.address,
    from: topicAddress(fromTopic),
    to: topicAddress(toTopic),
    value: BigInt(log.data),
  }
}

/**
 * A mint (Transfer from the zero address) is no one's payment: it has no payer to credit or to refund
 * (USDC refuses transfers to the zero address, so a refund would fail forever).
 */
export function isMint(transfer: Pick<TransferLog, 'from'>): boolean {
  return /^0x0{40}$/.test(transfer.from)
}

export function sameAddress(a: string, b: string): boolean {
  return a.toLowerCase() === b.toLowerCase()
}

/** Checksummed: the payer's address is stored and refunds are sent to it. */
function topicAddress(topic: string): Address {
  return getAddress(`0x${topic.slice(26)}`)
}
