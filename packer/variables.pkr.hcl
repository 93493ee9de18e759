# Variables of the golden-image template.
#
# The first group comes from the node class and only from it:
#   fleetgate spec vars CLASS --for packer > class.pkrvars.json
# None of them has a default, so a build without the class's var file fails at once instead of
# baking in a version written here. `fleetgate image build` writes that file for every build.

variable "class_name" {
  type        = string
  description = "Node class (inventory/classes/<class_name>.yml)."
}

variable "class_version" {
  type        = number
  description = "Version of the node class; the image is named <class_name>-<class_version>."
}

variable "os_release" {
  type        = string
  description = "OS release codename the class pins (e.g. bookworm)."
}

variable "kernel_abi" {
  type        = string
  description = "Kernel ABI the class pins (uname -r form)."
}

variable "kernel_package_version" {
  type        = string
  description = "Exact Debian version of linux-image-<kernel_abi>."
}

variable "driver_vendor" {
  type        = string
  description = "Accelerator driver vendor: nvidia, amd or none."
}

variable "driver_version" {
  type        = string
  description = "Exact driver package version, or empty for vendor none."
}

variable "accelerator_backend" {
  type        = string
  description = "Smoke backend of the class: nvidia, amd, cpu or none."
}

variable "ansible_extra_vars_json" {
  type        = string
  description = "Every fleetgate_* variable of the class, as JSON, passed to Ansible as extra vars."
}

# The second group describes one build; `fleetgate image build` sets all of them.

variable "output_dir" {
  type        = string
  description = "Directory that receives the artifact, image-manifest.json, packages.txt and Packer's manifest."
}

variable "work_dir" {
  type        = string
  description = "Build scratch directory; its fleetgate-upload/ subdirectory is copied into the image first (image.json, vendored packages)."
}

variable "build_id" {
  type        = string
  default     = "manual"
  description = "Unique id of this build; labels the build container."
}

variable "git_revision" {
  type        = string
  default     = "unknown"
  description = "Git commit of the checkout the image is built from."
}

variable "git_dirty" {
  type        = bool
  default     = false
  description = "Whether the checkout had uncommitted changes."
}

variable "template_sha256" {
  type        = string
  default     = ""
  description = "SHA-256 of this template's files, as fleetgate computes it."
}

variable "ansible_build_vars_json" {
  type        = string
  default     = "{}"
  description = "Build-only Ansible variables as JSON (e.g. a component left out with --omit); never versions."
}

# docker: a root filesystem for lab container hosts and CI.

variable "base_image" {
  type        = string
  default     = "localhost/fleetgate-image-base:latest"
  description = "Local container image the docker source starts from (fleetgate imports the base rootfs into podman)."
}

# qemu: a bootable disk for bare-metal and VM fleets.

variable "qemu_base_image" {
  type        = string
  default     = "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2"
  description = "URL or path of the base disk image (disk_image = true), e.g. a Debian cloud image."
}

variable "qemu_base_checksum" {
  type        = string
  default     = "none"
  description = "Checksum of the base disk image: \"sha256:<hex>\" or \"file:<url of SHA512SUMS>\". fleetgate always passes the sha256 of its base disk; pass one for any other base too."
}

variable "qemu_format" {
  type        = string
  default     = "qcow2"
  description = "Output disk format: qcow2 or raw."
}

variable "accelerator" {
  type        = string
  default     = "kvm"
  description = "qemu accelerator: kvm in production, tcg where /dev/kvm is missing or unusable."
}

variable "qemu_memory" {
  type        = number
  default     = 2048
  description = "Build VM memory in MiB."
}

variable "qemu_cpus" {
  type        = number
  default     = 2
  description = "Build VM CPUs."
}

variable "qemu_disk_size" {
  type        = string
  default     = "20G"
  description = "Size the base disk is grown to."
}

variable "qemu_args" {
  type        = list(list(string))
  default     = []
  description = "Extra qemu arguments, e.g. direct kernel boot (-kernel/-initrd/-append) for a base disk without a bootloader."
}

variable "ssh_username" {
  type        = string
  default     = "root"
  description = "SSH user of the qemu build VM."
}

variable "ssh_private_key_file" {
  type        = string
  default     = ""
  description = "Private key authorized for ssh_username in the qemu base image."
}

variable "ssh_timeout" {
  type        = string
  default     = "30m"
  description = "How long to wait for SSH on the qemu build VM (TCG boots are slow)."
}

# amazon-ebs: GPU AMIs. Validated everywhere, built only where AWS credentials exist.

variable "aws_region" {
  type    = string
  default = "us-east-1"
}

variable "aws_instance_type" {
  type        = string
  default     = "c6i.2xlarge"
  description = "Build instance; DKMS needs CPUs, not a GPU."
}

variable "aws_source_ami_owner" {
  type        = string
  default     = "136693071363"
  description = "Debian's AWS account, owner of the official Debian AMIs."
}

variable "aws_source_ami_name" {
  type        = string
  default     = "debian-12-amd64-*"
  description = "Name filter of the source AMI; the newest match is used."
}

variable "aws_ssh_username" {
  type    = string
  default = "admin"
}

variable "aws_volume_size_gb" {
  type    = number
  default = 40
}
