# Plugins of packer/fleetgate.pkr.hcl on current Packer (1.7 and later), which no longer bundles
# the docker, qemu, amazon and ansible components. Install them once per machine with
#
#   packer init packer/plugins/
#
# then build packer/ as usual. This block lives in its own directory because Debian's Packer
# 1.6.6 bundles those components and rejects `required_plugins` ("Blocks of type
# required_plugins are not expected here"), so the main template must not carry it.
packer {
  required_version = ">= 1.7.0"
  required_plugins {
    docker = {
      version = ">= 1.0.8"
      source  = "github.com/hashicorp/docker"
    }
    qemu = {
      version = ">= 1.0.9"
      source  = "github.com/hashicorp/qemu"
    }
    amazon = {
      version = ">= 1.2.6"
      source  = "github.com/hashicorp/amazon"
    }
    ansible = {
      version = ">= 1.1.0"
      source  = "github.com/hashicorp/ansible"
    }
  }
}
