// x402 `batch-settlement` (pay once, call many), chain side: where the contracts are, installing the
// project's own implementation of them on anvil, reading a channel, and the claim/refund transactions.
//
// The scheme as @x402/evm 2.27 defines it (dist/esm/chunk-5XX3PMSD.mjs constants, chunk-H25OEB2U.mjs ABI,
// chunk-H2QRXPTO.mjs client):
// - A channel is the EIP-712 hash (domain "x402 Batch Settlement" v1, verifyingContract = the channel
//   contract) of ChannelConfig(payer, payerAuthorizer, receiver, receiverAuthorizer, token, withdrawDelay,
//   salt). receiver = the 402's payTo, receiverAuthorizer and withdrawDelay come from the 402's `extra`.
// - The first paid request carries a `deposit` payload: an ERC-3009 ReceiveWithAuthorization to the
//   deposit collector (nonce = keccak256(abi.encode(channelId, salt))) plus the first voucher. The server
//   submits deposit(config, amount, collector, collectorData) — one transaction per deposit.
// - Every request carries a Voucher(channelId, maxClaimableAmount) signed by the payerAuthorizer, where
//   maxClaimableAmount = the server's charged cumulative + this request's price, exactly. A voucher on
//   another base gets the corrective 402 (error invalid_batch_settlement_evm_cumulative_amount_mismatch,
//   accepts[].extra.channelState.chargedCumulativeAmount + voucherState {signedMaxClaimable, signature}):
//   the client checks the signature is its own and resyncs.
// - A paid answer carries PAYMENT-RESPONSE {success, extra: {chargedAmount, channelState:
//   {chargedCumulativeAmount, …}}}; the client adds chargedAmount to its base.
// - The receiver claims vouchers many channels at a time (claim / claimWithSignature), then settle()
//   moves the claimed total to the receiver. The payer gets the rest back by a cooperative `refund`
//   payload (the server claims what is charged and refunds in one multicall) or, without the server, by
//   initiateWithdraw + finalizeWithdraw after withdrawDelay (the server must claim before then).
import {
  type Address,
  encodeAbiParameters,
  encodeFunctionData,
  getAddress,
  type Hex,
  hashTypedData,
  keccak256,
  type PublicClient,
} from 'viem'
import { anvilSetCode } from './anvil-process.ts'
import { batchSettlementArtifact, erc3009DepositCollectorArtifact } from './contracts/artifacts.ts'
import { keccakBytes } from './keccak.ts'
import { domainSeparator } from './recover-authorization.ts'

/** Where the published client expects the contracts (@x402/evm 2.27, batch-settlement/constants.ts). */
export const BATCH_SETTLEMENT_ADDRESS: Address = getAddress('0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003')
export const ERC3009_DEPOSIT_COLLECTOR_ADDRESS: Address = getAddress(
  '0x4020806089470a89826cB9fB1f4059150b550004',
)
export const BATCH_SCHEME = 'batch-settlement'
export const MIN_WITHDRAW_DELAY = 900
export const MAX_WITHDRAW_DELAY = 2_592_000

export const batchSettlementAbi = batchSettlementArtifact.abi

export interface ChannelConfig {
  payer: Address
  payerAuthorizer: Address
  receiver: Address
  receiverAuthorizer: Address
  token: Address
  withdrawDelay: number
  salt: Hex
}

const channelConfigTypes = {
  ChannelConfig: [
    { name: 'payer', type: 'address' },
    { name: 'payerAuthorizer', type: 'address' },
    { name: 'receiver', type: 'address' },
    { name: 'receiverAuthorizer', type: 'address' },
    { name: 'token', type: 'address' },
    { name: 'withdrawDelay', type: 'uint40' },
    { name: 'salt', type: 'bytes32' },
  ],
} as const

export const voucherTypes = {
  Voucher: [
    { name: 'channelId', type: 'bytes32' },
    { name: 'maxClaimableAmount', type: 'uint128' },
  ],
} as const

export function batchDomain(chainId: number) {
  return { name: 'x402 Batch Settlement', version: '1', chainId, verifyingContract: BATCH_SETTLEMENT_ADDRESS }
}

/** The channel id: the EIP-712 digest of the config (what the contract's getChannelId answers). */
export function channelIdOf(config: ChannelConfig, chainId: number): Hex {
  return hashTypedData({
    domain: batchDomain(chainId),
    types: channelConfigTypes,
    primaryType: 'ChannelConfig',
    message: config,
  })
}

export function voucherDigest(chainId: number, channelId: Hex, maxClaimableAmount: bigint): Hex {
  return hashTypedData({
    domain: batchDomain(chainId),
    types: voucherTypes,
    primaryType: 'Voucher',
    message: { channelId, maxClaimableAmount },
  })
}

const VOUCHER_TYPEHASH = keccak256(
  Buffer.from('Voucher(bytes32 channelId,uint128 maxClaimableAmount)'),
  'bytes',
)

/**
 * The same digest as voucherDigest, built by hand for the hot path (hashTypedData costs ~4 ms a call):
 * keccak256(0x1901 ‖ domainSeparator ‖ keccak256(typehash ‖ channelId ‖ uint256(amount))).
 */
export function voucherDigestBytes(chainId: number, channelId: Hex, maxClaimableAmount: bigint): Uint8Array {
  if (maxClaimableAmount < 0n || maxClaimableAmount >= 1n << 128n)
    throw new RangeError('uint128 out of range')
  const struct = new Uint8Array(96)
  struct.set(VOUCHER_TYPEHASH, 0)
  struct.set(Buffer.from(channelId.slice(2), 'hex'), 32)
  let v = maxClaimableAmount
  for (let i = 95; i >= 64 && v > 0n; i--) {
    struct[i] = Number(v & 0xffn)
    v >>= 8n
  }
  const message = new Uint8Array(66)
  message[0] = 0x19
  message[1] = 0x01
  message.set(domainSeparator(batchDomain(chainId)), 2)
  // The native keccak when it loads (keccak.ts): viem's, @noble/hashes in JS, was 5.6 % of x402-batch's busy
  // time here (two hashes a voucher).
  message.set(keccakBytes(struct), 34)
  return keccakBytes(message)
}

/**
 * Dev chain and tests only: the project's own contracts at the addresses the client expects. Neither has a
 * constructor or immutables, and their storage starts empty, so setting the runtime code is enough.
 */
export async function installBatchSettlement(rpcUrl: string): Promise<void> {
  await anvilSetCode(rpcUrl, BATCH_SETTLEMENT_ADDRESS, batchSettlementArtifact.deployedBytecode)
  await anvilSetCode(
    rpcUrl,
    ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
    erc3009DepositCollectorArtifact.deployedBytecode,
  )
}

export type BatchContractsCheck = { ok: true } | { ok: false; reason: string }

/**
 * Start-up check of the contracts at the addresses the published client expects (on a real network the x402
 * project's deployment, on the dev chain tollgate's own): both hold code, and the channel contract computes
 * the same channel id and voucher digest as the client signs and tollgate verifies (EIP-712 domain, chain id,
 * types), and accepts tollgate's withdraw delay. Code that answers otherwise would take deposits whose
 * vouchers could never be claimed. Three eth_calls; `addresses` only for tests.
 */
export async function checkBatchContracts(
  publicClient: PublicClient,
  q: { chainId: number; withdrawDelay: number; addresses?: { channel: Address; collector: Address } },
): Promise<BatchContractsCheck> {
  const channel = q.addresses?.channel ?? BATCH_SETTLEMENT_ADDRESS
  const collector = q.addresses?.collector ?? ERC3009_DEPOSIT_COLLECTOR_ADDRESS
  for (const [what, address] of [
    ['channel contract', channel],
    ['ERC-3009 deposit collector', collector],
  ] as const) {
    const code = await publicClient.getCode({ address })
    if (code === undefined || code === '0x') return { ok: false, reason: `no code at the ${what} ${address}` }
  }
  const sample: ChannelConfig = {
    payer: '0x0000000000000000000000000000000000000001',
    payerAuthorizer: '0x0000000000000000000000000000000000000002',
    receiver: '0x0000000000000000000000000000000000000003',
    receiverAuthorizer: '0x0000000000000000000000000000000000000004',
    token: '0x0000000000000000000000000000000000000005',
    withdrawDelay: q.withdrawDelay,
    salt: `0x${'42'.repeat(32)}`,
  }
  const expectedId = channelIdOf(sample, q.chainId)
  try {
    const read = (functionName: string, args: readonly unknown[]) =>
      publicClient.readContract({ address: channel, abi: batchSettlementAbi, functionName, args } as never)
    const id = (await read('getChannelId', [toContractConfig(sample)])) as Hex
    if (id.toLowerCase() !== expectedId.toLowerCase())
      return {
        ok: false,
        reason: `the channel contract ${channel} computes another channel id (EIP-712 domain or types differ)`,
      }
    const digest = (await read('getVoucherDigest', [expectedId, 1000n])) as Hex
    if (digest.toLowerCase() !== voucherDigest(q.chainId, expectedId, 1000n).toLowerCase())
      return { ok: false, reason: `the channel contract ${channel} computes another voucher digest` }
    const min = Number(await read('MIN_WITHDRAW_DELAY', []))
    const max = Number(await read('MAX_WITHDRAW_DELAY', []))
    if (q.withdrawDelay < min || q.withdrawDelay > max)
      return {
        ok: false,
        reason: `the channel contract ${channel} refuses a withdraw delay of ${q.withdrawDelay} s`,
      }
  } catch (err) {
    return {
      ok: false,
      reason: `the channel contract ${channel} does not answer the batch-settlement ABI (${err instanceof Error ? err.message.split('\n')[0] : String(err)})`,
    }
  }
  return { ok: true }
}

export interface OnChainChannel {
  balance: bigint
  totalClaimed: bigint
}

export async function readChannel(publicClient: PublicClient, channelId: Hex): Promise<OnChainChannel> {
  const [balance, totalClaimed] = (await publicClient.readContract({
    address: BATCH_SETTLEMENT_ADDRESS,
    abi: batchSettlementAbi,
    functionName: 'channels',
    args: [channelId],
  })) as [bigint, bigint]
  return { balance, totalClaimed }
}

export function toContractConfig(config: ChannelConfig) {
  return {
    payer: getAddress(config.payer),
    payerAuthorizer: getAddress(config.payerAuthorizer),
    receiver: getAddress(config.receiver),
    receiverAuthorizer: getAddress(config.receiverAuthorizer),
    token: getAddress(config.token),
    withdrawDelay: config.withdrawDelay,
    salt: config.salt,
  }
}

export interface VoucherClaim {
  config: ChannelConfig
  maxClaimableAmount: bigint
  signature: Hex
  totalClaimed: bigint
}

function claimArgs(claims: VoucherClaim[]) {
  return claims.map((c) => ({
    voucher: { channel: toContractConfig(c.config), maxClaimableAmount: c.maxClaimableAmount },
    signature: c.signature,
    totalClaimed: c.totalClaimed,
  }))
}

/** claim(many channels) then settle(receiver, token): one transaction moves the claimed USDC to the receiver. */
export function claimAndSettleCalldata(claims: VoucherClaim[], receiver: Address, token: Address): Hex {
  const calls = [
    encodeFunctionData({ abi: batchSettlementAbi, functionName: 'claim', args: [claimArgs(claims)] }),
    encodeFunctionData({ abi: batchSettlementAbi, functionName: 'settle', args: [receiver, token] }),
  ]
  return encodeFunctionData({ abi: batchSettlementAbi, functionName: 'multicall', args: [calls] })
}

/** Cooperative refund: claim what is charged, settle it, refund `amount` of the rest, in one transaction. */
export function claimAndRefundCalldata(
  config: ChannelConfig,
  claim: VoucherClaim | null,
  amount: bigint,
): Hex {
  const calls: Hex[] = []
  if (claim) {
    calls.push(
      encodeFunctionData({ abi: batchSettlementAbi, functionName: 'claim', args: [claimArgs([claim])] }),
    )
    calls.push(
      encodeFunctionData({
        abi: batchSettlementAbi,
        functionName: 'settle',
        args: [config.receiver, config.token],
      }),
    )
  }
  calls.push(
    encodeFunctionData({
      abi: batchSettlementAbi,
      functionName: 'refund',
      args: [toContractConfig(config), amount],
    }),
  )
  return encodeFunctionData({ abi: batchSettlementAbi, functionName: 'multicall', args: [calls] })
}

export function depositCalldata(config: ChannelConfig, amount: bigint, collectorData: Hex): Hex {
  return encodeFunctionData({
    abi: batchSettlementAbi,
    functionName: 'deposit',
    args: [toContractConfig(config), amount, ERC3009_DEPOSIT_COLLECTOR_ADDRESS, collectorData],
  })
}

/** The ERC-3009 collector's data, as the scheme encodes it: (validAfter, validBefore, salt, signature). */
export function erc3009CollectorData(a: {
  validAfter: string
  validBefore: string
  salt: Hex
  signature: Hex
}): Hex {
  return encodeAbiParameters(
    [{ type: 'uint256' }, { type: 'uint256' }, { type: 'uint256' }, { type: 'bytes' }],
    [BigInt(a.validAfter), BigInt(a.validBefore), BigInt(a.salt), a.signature],
  )
}
