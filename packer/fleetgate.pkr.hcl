# fleetgate golden image: one node class -> one immutable image <class>-<version>.
#
# The same playbooks/golden.yml that live hosts get provisions the image, with the class's
# variables (variables.pkr.hcl, filled from `fleetgate spec vars CLASS --for packer`). An
# in-image gate (playbooks/verify-image.yml: node_manifest in verify mode) then fails the build
# on any drift from the class. Run it through `fleetgate image build CLASS`, which prepares
# the base image, the variables and the podman API socket, and assembles the output directory;
# see packer/README.md for running Packer by hand.
#
# Valid on Packer 1.6.6 (Debian 12) and on current Packer. Current Packer installs its plugins
# separately: `packer init packer/plugins/` reads the required_plugins block there, which
# 1.6.6 would reject, so it lives outside this directory.

# What every provisioner of one source shares. Only amazon-ebs logs in as an unprivileged user
# (sudo for the shell steps, become for Ansible); docker and qemu builds log in as root.
locals {
  sources = ["docker", "qemu", "amazon-ebs"]
  become  = { docker = false, qemu = false, "amazon-ebs" = true }

  shell_execute_command = { for s in local.sources :
    s => "${local.become[s] ? "sudo -E " : ""}sh -eu '{{.Path}}'"
  }
  ssh_username = { docker = var.ssh_username, qemu = var.ssh_username, "amazon-ebs" = var.aws_ssh_username }

  # The class's variables, the build's, and become: the same for the build and the gate.
  ansible_extra_arguments = { for s in local.sources : s => [
    "--extra-vars", var.ansible_extra_vars_json,
    "--extra-vars", var.ansible_build_vars_json,
    "--extra-vars", "ansible_become=${local.become[s]}",
  ] }

  # Packer 1.6.6's SSH proxy offers only ssh-rsa host and user keys; current OpenSSH refuses
  # both unless asked (see ../shared/DESIGN.md).
  ansible_env_vars = [
    "ANSIBLE_CONFIG=${path.root}/../ansible.cfg",
    "ANSIBLE_SSH_ARGS=-o ControlMaster=auto -o ControlPersist=60s -o HostKeyAlgorithms=+ssh-rsa -o PubkeyAcceptedKeyTypes=+ssh-rsa",
    "ANSIBLE_NOCOLOR=1",
    "ANSIBLE_FORCE_COLOR=0",
  ]
}

# A root filesystem tarball, for lab container hosts and CI. Runs against podman's
# Docker-compatible API (DOCKER_HOST=unix:///...sock); `commit` fails there on an API
# mismatch, so the container is exported instead.
source "docker" "rootfs" {
  image       = var.base_image
  pull        = false
  export_path = "${var.output_dir}/rootfs.tar"
  run_command = [
    "-d", "-i", "-t",
    "--label", "io.fleetgate.image-build=${var.build_id}",
    "--entrypoint=/bin/sh", "--", "{{.Image}}",
  ]
}

# A bootable disk for bare-metal and VM fleets, from a base disk image (a Debian cloud image in
# production; fleetgate's lab base disk with direct kernel boot through qemu_args here).
source "qemu" "disk" {
  iso_url              = var.qemu_base_image
  iso_checksum         = var.qemu_base_checksum
  disk_image           = true
  use_backing_file     = false
  format               = var.qemu_format
  disk_size            = var.qemu_disk_size
  disk_interface       = "virtio"
  net_device           = "virtio-net"
  accelerator          = var.accelerator
  memory               = var.qemu_memory
  cpus                 = var.qemu_cpus
  headless             = true
  qemuargs             = var.qemu_args
  output_directory     = "${var.output_dir}/qemu"
  vm_name              = "disk.${var.qemu_format}"
  communicator         = "ssh"
  ssh_username         = var.ssh_username
  ssh_private_key_file = var.ssh_private_key_file
  ssh_timeout          = var.ssh_timeout
  shutdown_command     = "systemctl poweroff"
}

# GPU AMIs. Validated here; built only where AWS credentials and the network exist.
source "amazon-ebs" "ami" {
  region        = var.aws_region
  instance_type = var.aws_instance_type
  source_ami_filter {
    filters = {
      name                = var.aws_source_ami_name
      architecture        = "x86_64"
      virtualization-type = "hvm"
      root-device-type    = "ebs"
    }
    owners      = [var.aws_source_ami_owner]
    most_recent = true
  }
  ssh_username = var.aws_ssh_username
  # Packer's temporary key pair must not stay authorized in the AMI.
  ssh_clear_authorized_keys = true
  ami_name                  = "fleetgate-${var.class_name}-${var.class_version}"
  ami_description           = "fleetgate golden image of node class ${var.class_name} version ${var.class_version}"
  ena_support               = true
  launch_block_device_mappings {
    device_name           = "/dev/xvda"
    volume_size           = var.aws_volume_size_gb
    volume_type           = "gp3"
    throughput            = 125
    iops                  = 3000
    delete_on_termination = true
  }
  tags = {
    "fleetgate:class"         = var.class_name
    "fleetgate:class-version" = "${var.class_version}"
    "fleetgate:kernel-abi"    = var.kernel_abi
    "fleetgate:driver"        = trimspace("${var.driver_vendor} ${var.driver_version}")
    "fleetgate:git-revision"  = var.git_revision
  }
  run_tags = {
    "fleetgate:image-build" = var.build_id
  }
}

build {
  sources = ["source.docker.rootfs", "source.qemu.disk", "source.amazon-ebs.ami"]

  # The build's own files: /etc/fleetgate/image.json (what built this image) and, when the
  # build vendors packages (`fleetgate image build --vendor-debs DIR`), a flat apt repository.
  # No trailing slash: the directory itself lands in /tmp, the same way over SSH and docker.
  provisioner "file" {
    source      = "${var.work_dir}/fleetgate-upload"
    destination = "/tmp"
  }

  provisioner "shell" {
    execute_command = local.shell_execute_command[source.type]
    inline = [
      "install -d -m 0755 /etc/fleetgate",
      "install -m 0644 /tmp/fleetgate-upload/image.json /etc/fleetgate/image.json",
      "if [ -d /tmp/fleetgate-upload/vendor ]; then",
      "  rm -rf /var/lib/fleetgate/vendor && install -d -m 0755 /var/lib/fleetgate",
      "  mv /tmp/fleetgate-upload/vendor /var/lib/fleetgate/vendor",
      "  echo 'deb [trusted=yes] file:/var/lib/fleetgate/vendor ./' > /etc/apt/sources.list.d/fleetgate-vendor.list",
      "  apt-get update -qq",
      "fi",
      "rm -rf /tmp/fleetgate-upload",
    ]
  }

  provisioner "ansible" {
    playbook_file    = "${path.root}/../playbooks/golden.yml"
    user             = local.ssh_username[source.type]
    extra_arguments  = local.ansible_extra_arguments[source.type]
    ansible_env_vars = local.ansible_env_vars
  }

  provisioner "shell" {
    execute_command = local.shell_execute_command[source.type]
    inline = [
      "rm -f /etc/apt/sources.list.d/fleetgate-vendor.list /var/lib/apt/lists/_var_lib_fleetgate_vendor_*",
      "rm -rf /var/lib/fleetgate/vendor",
    ]
  }

  # The gate: node_manifest in verify mode inside the finished image. Any drift from the class
  # (kernel not installed or not default, a driver or DKMS module missing or at another
  # version) fails the build, and no artifact is published. It also copies the image's own
  # /etc/fleetgate/manifest.json and its package list beside the artifact.
  provisioner "ansible" {
    playbook_file = "${path.root}/../playbooks/verify-image.yml"
    user          = local.ssh_username[source.type]
    extra_arguments = concat(local.ansible_extra_arguments[source.type], [
      "--extra-vars", "image_verify_out_dir=${var.output_dir}",
    ])
    ansible_env_vars = local.ansible_env_vars
  }

  # Last: forget the key this build logged in with (the qemu lab base authorizes a per-build
  # key, commented fleetgate-image-build). Sessions already open are not affected.
  provisioner "shell" {
    execute_command = local.shell_execute_command[source.type]
    inline = [
      "for f in /root/.ssh/authorized_keys /home/*/.ssh/authorized_keys; do",
      "  if [ -f \"$f\" ]; then sed -i '/ fleetgate-image-build$/d' \"$f\"; fi",
      "done",
    ]
  }

  post-processor "manifest" {
    output     = "${var.output_dir}/packer-manifest.json"
    strip_path = true
    custom_data = {
      class                  = var.class_name
      class_version          = "${var.class_version}"
      kernel_abi             = var.kernel_abi
      kernel_package_version = var.kernel_package_version
      driver                 = trimspace("${var.driver_vendor} ${var.driver_version}")
      accelerator_backend    = var.accelerator_backend
      build_id               = var.build_id
      git_revision           = var.git_revision
      git_dirty              = "${var.git_dirty}"
      template_sha256        = var.template_sha256
      base_image             = var.base_image
    }
  }

  post-processor "checksum" {
    checksum_types = ["sha256"]
    output         = "${var.output_dir}/artifact.{{.ChecksumType}}"
  }
}
