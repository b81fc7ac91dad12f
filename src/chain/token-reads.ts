// The token reads of an x402 verification (is this nonce used, what does this payer hold) for the hot path,
// without viem's generic machinery: calldata built by concatenation, the reads of one event-loop turn sent
// as JSON-RPC batches of at most `batchMax` calls (hosted nodes refuse larger batches, whole) over a
// keep-alive undici pool, the 32-byte answers decoded by hand. Same node and
// same eth_calls as readContract; viem's path (ABI coding, batch scheduler, fetch, per-request timers) was
// ~a quarter of the main thread's CPU per x402 call in the bench profile.
import { Pool } from 'undici'
import type { Address, Hex } from 'viem'
import { toFunctionSelector } from 'viem'
import type { RpcRequestListener } from './client.ts'

export interface TokenReads {
  authorizationUsed(authorizer: Address, nonce: Hex): Promise<boolean>
  balanceOf(owner: Address): Promise<bigint>
  /**
   * What `owner` can spend: its balance, or 0 when the token blacklists it (USDC's `isBlacklisted`: a
   * blacklisted account can neither send nor receive, so an authorization or permit of its would be served and
   * never settle). A token without `isBlacklisted` (its call reverts, or answers nothing, on the first read
   * while the balance read answers) is taken to list nobody, and is not asked again.
   */
  spendable(owner: Address): Promise<bigint>
  /**
   * Why the token cannot move money to `account` now: `paused` (USDC's pause stops every transfer),
   * `blacklisted` (the account can receive nothing), or null. A token without `paused()` or
   * `isBlacklisted()` is neither.
   */
  halted(account: Address): Promise<'paused' | 'blacklisted' | null>
  /** The chain's head (eth_blockNumber), in the same JSON-RPC batch as the reads queued beside it. */
  blockNumber(): Promise<bigint>
  /** The token's ERC-20 allowance of `owner` to `spender` (x402 upto: to Permit2). */
  allowance(owner: Address, spender: Address): Promise<bigint>
  /** Permit2's unordered-nonce bitmap word `wordPos` of `owner` (x402 upto: is a nonce spent). */
  nonceBitmap(permit2: Address, owner: Address, wordPos: bigint): Promise<bigint>
  /** The token's EIP-2612 nonce of `owner` (x402 upto with `eip2612GasSponsoring`: the permit's must be it). */
  permitNonce(owner: Address): Promise<bigint>
  close(): Promise<void>
}

export class RpcReadError extends Error {
  override name = 'RpcReadError'
}

const AUTHORIZATION_STATE = toFunctionSelector('authorizationState(address,bytes32)')
const BALANCE_OF = toFunctionSelector('balanceOf(address)')
const ALLOWANCE = toFunctionSelector('allowance(address,address)')
const NONCE_BITMAP = toFunctionSelector('nonceBitmap(address,uint256)')
const NONCES = toFunctionSelector('nonces(address)')
const IS_BLACKLISTED = toFunctionSelector('isBlacklisted(address)')
const PAUSED = toFunctionSelector('paused()')
const WORD = /^0x[0-9a-fA-F]{64}$/
const ADDRESS = /^0x[0-9a-fA-F]{40}$/
const BYTES32 = /^0x[0-9a-fA-F]{64}$/
const QUANTITY = /^0x[0-9a-fA-F]{1,64}$/

/** A call's own failure, as a node words a function the contract lacks: a revert, or no 32-byte answer. */
const NO_SUCH_FUNCTION = /revert|no 32-byte word/i

/** Public providers' common batch limit; a node that takes more can be given more (chain.rpc_batch_max). */
export const DEFAULT_BATCH_MAX = 100

interface Pending {
  /** null: eth_blockNumber. */
  to: string | null
  data: string
  resolve(word: string): void
  reject(err: Error): void
}

/** The JSON-RPC batch of the reads, each call's id its place in the batch. */
function batchBody(batch: Pending[]): string {
  let body = '['
  for (let i = 0; i < batch.length; i++) {
    if (i > 0) body += ','
    const p = batch[i]!
    body +=
      p.to === null
        ? `{"jsonrpc":"2.0","id":${i},"method":"eth_blockNumber","params":[]}`
        : `{"jsonrpc":"2.0","id":${i},"method":"eth_call","params":[{"to":"${p.to}","data":"${p.data}"},"latest"]}`
  }
  return `${body}]`
}

/** Each read its answer by id: a word (a quantity for the head), or an error; a call left out is one too. */
function deliver(batch: Pending[], answers: unknown): void {
  if (!Array.isArray(answers))
    throw new RpcReadError('RPC answered a batch with something else than an array')
  const answered = new Array<boolean>(batch.length).fill(false)
  for (const a of answers as Array<{ id?: unknown; result?: unknown; error?: { message?: string } }>) {
    const p = typeof a?.id === 'number' ? batch[a.id] : undefined
    if (!p || answered[a.id as number]) continue
    answered[a.id as number] = true
    if (typeof a.result === 'string' && (p.to === null ? QUANTITY : WORD).test(a.result)) p.resolve(a.result)
    else p.reject(new RpcReadError(a.error?.message ?? 'RPC answered no 32-byte word'))
  }
  for (let i = 0; i < batch.length; i++) {
    if (!answered[i]) batch[i]!.reject(new RpcReadError('RPC left a call of the batch unanswered'))
  }
}

/**
 * TokenReads.spendable: the balance, and beside it in the same batch whether the token blacklists `owner`
 * (0 if so), while the token is not known to lack isBlacklisted.
 */
async function readSpendable(
  call: (data: string) => Promise<string>,
  owner: Address,
  token: { blacklists: boolean | null },
): Promise<bigint> {
  const balance = call(`${BALANCE_OF}${addressWord(owner)}`)
  if (token.blacklists === false) return BigInt(await balance)
  const listed = call(`${IS_BLACKLISTED}${addressWord(owner)}`).then(
    (word) => BigInt(word) !== 0n,
    (err: unknown) => {
      // Asked beside the balance, in the same batch: the node answered, so this one is the token's no.
      if (token.blacklists === null && err instanceof RpcReadError && NO_SUCH_FUNCTION.test(err.message))
        return null
      throw err
    },
  )
  const [atomic, isListed] = await Promise.all([balance, listed])
  token.blacklists = isListed !== null
  return isListed === true ? 0n : BigInt(atomic)
}

/** TokenReads.halted: paused() and isBlacklisted(account) in one batch; a function the token lacks is a no. */
async function readHalted(
  call: (data: string) => Promise<string>,
  account: Address,
): Promise<'paused' | 'blacklisted' | null> {
  const flag = (data: string) =>
    call(data).then(
      (word) => BigInt(word) !== 0n,
      (err: unknown) => {
        if (err instanceof RpcReadError && NO_SUCH_FUNCTION.test(err.message)) return false
        throw err
      },
    )
  const [paused, listed] = await Promise.all([flag(PAUSED), flag(`${IS_BLACKLISTED}${addressWord(account)}`)])
  return paused ? 'paused' : listed ? 'blacklisted' : null
}

/** An ABI word: an address left-padded to 32 bytes. Inputs come from parsed payloads, checked again here. */
function addressWord(a: string): string {
  if (!ADDRESS.test(a)) throw new RpcReadError(`not an address: ${a}`)
  return `000000000000000000000000${a.slice(2).toLowerCase()}`
}

export function createTokenReads(o: {
  rpcUrl: string
  token: Address
  timeoutMs: number
  /** Calls per JSON-RPC batch, at most (chain.rpc_batch_max); a turn with more sends several. */
  batchMax?: number
  onRpcRequest?: RpcRequestListener
}): TokenReads {
  const url = new URL(o.rpcUrl)
  const path = `${url.pathname}${url.search}`
  const headers: Record<string, string> = { 'content-type': 'application/json' }
  if (url.username || url.password) {
    const user = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`
    headers.authorization = `Basic ${Buffer.from(user).toString('base64')}`
  }
  const pool = new Pool(url.origin, { connections: 8, pipelining: 1 })
  const to = o.token.toLowerCase()
  let queue: Pending[] = []
  let scheduled = false

  const batchMax = o.batchMax ?? DEFAULT_BATCH_MAX
  const flush = () => {
    scheduled = false
    const turn = queue
    queue = []
    for (let i = 0; i < turn.length; i += batchMax) {
      const batch = turn.length <= batchMax ? turn : turn.slice(i, i + batchMax)
      send(batch).catch((err: unknown) => {
        const e = err instanceof Error ? err : new RpcReadError(String(err))
        for (const p of batch) p.reject(e)
      })
    }
  }

  const send = async (batch: Pending[]) => {
    const body = batchBody(batch)
    const methods = batch.map((p) => (p.to === null ? 'eth_blockNumber' : 'eth_call'))
    o.onRpcRequest?.(batch.length === 1 ? methods[0]! : 'batch', methods)
    const res = await pool.request({
      method: 'POST',
      path,
      headers,
      body,
      headersTimeout: o.timeoutMs,
      bodyTimeout: o.timeoutMs,
    })
    const text = await res.body.text()
    if (res.statusCode !== 200) throw new RpcReadError(`RPC answered HTTP ${res.statusCode}`)
    deliver(batch, JSON.parse(text) as unknown)
  }

  /** Whether the token answers isBlacklisted; null until its first answer. */
  const token: { blacklists: boolean | null } = { blacklists: null }

  const call = (data: string, target: string | null = to): Promise<string> =>
    new Promise<string>((resolve, reject) => {
      queue.push({ to: target, data, resolve, reject })
      if (!scheduled) {
        scheduled = true
        setImmediate(flush)
      }
    })

  return {
    async authorizationUsed(authorizer, nonce) {
      if (!BYTES32.test(nonce)) throw new RpcReadError(`not a 32-byte nonce: ${nonce}`)
      const word = await call(
        `${AUTHORIZATION_STATE}${addressWord(authorizer)}${nonce.slice(2).toLowerCase()}`,
      )
      return BigInt(word) !== 0n
    },
    async balanceOf(owner) {
      return BigInt(await call(`${BALANCE_OF}${addressWord(owner)}`))
    },
    spendable: (owner) => readSpendable(call, owner, token),
    halted: (account) => readHalted(call, account),
    async blockNumber() {
      return BigInt(await call('', null))
    },
    async allowance(owner, spender) {
      return BigInt(await call(`${ALLOWANCE}${addressWord(owner)}${addressWord(spender)}`))
    },
    async nonceBitmap(permit2, owner, wordPos) {
      if (wordPos < 0n || wordPos >= 1n << 256n) throw new RpcReadError(`not a uint256: ${wordPos}`)
      const data = `${NONCE_BITMAP}${addressWord(owner)}${wordPos.toString(16).padStart(64, '0')}`
      if (!ADDRESS.test(permit2)) throw new RpcReadError(`not an address: ${permit2}`)
      return BigInt(await call(data, permit2.toLowerCase()))
    },
    async permitNonce(owner) {
      return BigInt(await call(`${NONCES}${addressWord(owner)}`))
    },
    close: () => pool.close(),
  }
}
