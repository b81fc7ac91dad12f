// anvil's deterministic dev accounts (the public "test … junk" mnemonic): account 0 is the local treasury,
// 1..N the demo payers. Test keys only: anyone can derive them, so they must never hold real funds.
import { pbkdf2Sync } from 'node:crypto'
import { type Address, type Hex, toHex } from 'viem'
import { HDKey, hdKeyToAccount } from 'viem/accounts'

export const ANVIL_MNEMONIC = 'test test test test test test test test test test test junk'

export interface DevAccount {
  address: Address
  privateKey: Hex
}

let root: HDKey | undefined

/** BIP-39 seed through node's native PBKDF2 (derived once), then BIP-44 m/44'/60'/0'/0/i as anvil does. */
export function devAccount(index: number): DevAccount {
  root ??= HDKey.fromMasterSeed(pbkdf2Sync(ANVIL_MNEMONIC.normalize('NFKD'), 'mnemonic', 2048, 64, 'sha512'))
  const account = hdKeyToAccount(root, { addressIndex: index })
  return { address: account.address, privateKey: toHex(account.getHdKey().privateKey!) }
}
