// SPDX-License-Identifier: MIT
// Creates TestSmartWallets at CREATE2 addresses known before they exist: a counterfactual payer for tests
// (ERC-6492: the wallet signs before it is deployed, and whoever settles deploys it through this factory).
pragma solidity ^0.8.24;

import {TestSmartWallet} from "./TestSmartWallet.sol";

contract TestSmartWalletFactory {
  /// The wallet of `owner` and `salt`; an existing one is returned, not created again.
  function createWallet(address owner, bytes32 salt) external returns (address wallet) {
    wallet = walletAddress(owner, salt);
    if (wallet.code.length == 0) new TestSmartWallet{salt: salt}(owner);
  }

  function walletAddress(address owner, bytes32 salt) public view returns (address) {
    bytes32 codeHash = keccak256(abi.encodePacked(type(TestSmartWallet).creationCode, abi.encode(owner)));
    return address(uint160(uint256(keccak256(abi.encodePacked(bytes1(0xff), address(this), salt, codeHash)))));
  }
}
