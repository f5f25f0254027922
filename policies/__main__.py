from trainyard_pack import PACK_NAME, PolicyPack, policies

PolicyPack(PACK_NAME, policies())
